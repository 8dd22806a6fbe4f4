"""`/healthz`: the process answers, and the control plane answered a moment ago.

Why not a query per request: `/healthz` needs no token, so a check per request would let anyone turn
requests into control-plane queries and thread hand-offs, and under load each probe would wait for
a pool thread. Instead a check (``SELECT 1``, in a thread) runs at most once per `refresh_s`, started
by the first request that finds the last one older than that; requests answer the last result on
the event loop without waiting for it. A result older than `stale_s` is not used: the request waits
for the running check (at most `stale_s`), and a check that fails or does not finish is a 503.
So a control plane that goes away turns `/healthz` to 503 within about `refresh_s` plus the check's
own time. `/readyz` still checks on every request (it is the orchestrator's, not the internet's).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

REFRESH_S: Final = 1.0
STALE_S: Final = 5.0


class ControlPlaneHealth:
    def __init__(self, check: Callable[[], bool], *, refresh_s: float = REFRESH_S, stale_s: float = STALE_S) -> None:
        self.check = check  # blocking: True when the control plane answered
        self.refresh_s = refresh_s
        self.stale_s = stale_s
        self.result: bool | None = None
        self.checked_at = float("-inf")  # monotonic time the last check started
        self.running: asyncio.Future[bool] | None = None

    def _start(self) -> asyncio.Future[bool]:
        if self.running is None:
            self.checked_at = time.monotonic()
            self.running = asyncio.get_running_loop().run_in_executor(None, self._safe_check)
            self.running.add_done_callback(self._done)
        return self.running

    def _safe_check(self) -> bool:
        try:
            return self.check()
        except Exception:
            return False

    def _done(self, future: asyncio.Future[bool]) -> None:
        self.running = None
        self.result = False if future.cancelled() or future.exception() else future.result()

    async def healthy(self) -> bool:
        age = time.monotonic() - self.checked_at
        if age >= self.refresh_s:
            running = self._start()
            if self.result is None or age >= self.stale_s:
                try:
                    return await asyncio.wait_for(asyncio.shield(running), self.stale_s)
                except TimeoutError:
                    return False
        return bool(self.result)
