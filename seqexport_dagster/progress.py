"""Progress on stderr for long operations (verify, demo, key rotation, backfill).

The core reports progress through a plain callback, ``Advance(what, done, total)``, and knows
nothing about terminals. The CLI turns it into `rich` progress bars on stderr, only when stderr is a
terminal and ``--json`` is off; otherwise the callback does nothing, so scripts and logs see exactly
what they saw before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any, Protocol

#: ``(what, done, total)``; ``total`` is ``None`` while unknown.
Advance = Callable[[str, int, int | None], None]


def no_progress(what: str, done: int, total: int | None) -> None:
    return None


class Reporter(Protocol):
    def advance(self, what: str, done: int, total: int | None) -> None: ...

    def line(self, text: str) -> None: ...


class _Plain:
    """No bars: lines go to the stream as they always did."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def advance(self, what: str, done: int, total: int | None) -> None:
        return None

    def line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class _Bars:
    """One `rich` bar per ``what``, pinned below the lines printed meanwhile."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}

    def advance(self, what: str, done: int, total: int | None) -> None:
        task = self.tasks.get(what)
        if task is None:
            task = self.tasks[what] = self.progress.add_task(what, total=total)
        self.progress.update(task, completed=done, total=total)

    def line(self, text: str) -> None:
        self.progress.console.print(text, markup=False, highlight=False)


def bars_wanted(as_json: bool, stream: IO[str] | None = None) -> bool:
    """Bars only for a person watching: stderr is a terminal and the output is not JSON."""
    stream = sys.stderr if stream is None else stream
    return not as_json and stream.isatty()


@contextmanager
def reporter(as_json: bool, stream: IO[str] | None = None) -> Iterator[Reporter]:
    stream = sys.stderr if stream is None else stream
    if not bars_wanted(as_json, stream):
        yield _Plain(stream)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(file=stream, stderr=stream is sys.stderr)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=False) as progress:
        yield _Bars(progress)
