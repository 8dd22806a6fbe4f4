"""Wall-clock time in epoch milliseconds: the one default clock of the runner, the API and the CLI.

A module of its own so that reading the time pulls in nothing else: the API and the CLI read the
control plane without importing the writer and the source readers that the runner needs. Every
component takes its clock as a parameter; tests and the demo pass a pinned one.
"""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
