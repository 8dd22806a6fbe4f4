"""Faults of one simulated world, all drawn from the world's one `random.Random`.

- at the store, per send: 5xx and resets before sending, replies lost after landing, answers past
  the deadline (after landing), a worker killed just before a send or just after one landed;
- a key revoked for a while (every send with that access key id is refused 403 until the end of
  the revocation);
- the control plane (`faulty_store`, `faulty_leases`): a database error before a call, or after a
  write committed (the answer was lost); and, once the worker was killed, every call raises
  `SimCrash`, so nothing of a dead worker is written;
- leases lapse on their own: a killed worker's lease is left to expire (or, at random, its run is
  known to have ended and the lease is taken over).

`enabled` off (the world's quiet end) stops every fault: the oracle "an export whose faults have
stopped shows no error" is checked after it.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from seqexport_dagster.errors import RetryableError
from seqexport_dagster.store import ControlPlane
from seqexport_dagster.store.lease import Leases
from seqexport_dagster_tests.support.sim.bucket import SimCrash

#: Control-plane calls that may fail (reads and writes of a run).
DB_CALLS: Final = (
    "get_export",
    "state",
    "start_window",
    "window_parts",
    "record_part_intent",
    "mark_part_landed",
    "commit_window",
    "fail_window",
    "committed_at",
    "destination_config",
    "mark_reconciled",
)
#: Calls added to the run's path after the first seeds had found bugs. Their faults are drawn from
#: a stream of their own (`SimFaults.later_rng`), so every earlier seed's history stays as it was.
LATER_DB_CALLS: Final = (
    "pending_body",
    "mark_replacing",
    "clear_replacing",
    "replace_unfinished",
    "manifest_chain",
    "record_manifest_chain",
    "committed_places",
    "settle_error",
)
#: Of those, the writes whose answer may be lost after they committed.
DB_WRITES: Final = frozenset(
    {
        "start_window",
        "record_part_intent",
        "mark_part_landed",
        "commit_window",
        "fail_window",
        "mark_reconciled",
        "mark_replacing",
        "clear_replacing",
        "record_manifest_chain",
    }
)


@dataclass
class Rates:
    server_error: float = 0.0
    reset: float = 0.0
    lost_reply: float = 0.0
    slow: float = 0.0
    db_error: float = 0.0
    crash: float = 0.0  # per send, while a crash is armed for the run

    @classmethod
    def draw(cls, rng: random.Random, level: float) -> Rates:
        def r(top: float) -> float:
            return round(rng.uniform(0, top) * level, 4)

        return cls(r(0.08), r(0.06), r(0.05), r(0.01), r(0.01), r(0.05))


@dataclass
class SimFaults:
    rng: random.Random
    clock: Callable[[], int]
    rates: Rates = field(default_factory=Rates)
    enabled: bool = True
    #: access key id -> revoked until (ms)
    revoked_until: dict[str, int] = field(default_factory=dict)
    crash_armed: bool = False
    dead: bool = False
    injected: Counter[str] = field(default_factory=Counter)
    #: The stream `LATER_DB_CALLS` draw their faults from (None: they get none).
    later_rng: random.Random | None = None

    def _roll(self, p: float, rng: random.Random | None = None) -> bool:
        return self.enabled and p > 0 and (rng or self.rng).random() < p

    def before_send(self, bucket: str, key_id: str, key: str) -> str | None:
        if not self.enabled:
            return None
        if self.crash_armed and self._roll(self.rates.crash):
            return self._hit("crash")
        if self.revoked_until.get(key_id, -1) > self.clock():
            return self._hit("revoked")
        if self._roll(self.rates.server_error):
            return self._hit("5xx")
        if self._roll(self.rates.reset):
            return self._hit("reset")
        return None

    def after_send(self, bucket: str, key: str) -> str | None:
        if not self.enabled:
            return None
        if self.crash_armed and self._roll(self.rates.crash):
            return self._hit("crash")
        if self._roll(self.rates.lost_reply):
            return self._hit("lost")
        if self._roll(self.rates.slow):
            return self._hit("slow")
        return None

    def _hit(self, kind: str) -> str:
        self.injected[kind] += 1
        if kind == "crash":
            self.dead, self.crash_armed = True, False
        return kind

    def revoke(self, key_id: str, until_ms: int) -> None:
        self.injected["key revoked"] += 1
        self.revoked_until[key_id] = until_ms

    def db_call(self, name: str, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.dead:
            raise SimCrash(name)
        rng = self.later_rng if name in LATER_DB_CALLS else self.rng
        if rng is None:
            return call(*args, **kwargs)
        if self._roll(self.rates.db_error, rng):
            self.injected["db error"] += 1
            raise RetryableError("control-plane database unavailable: simulated outage")
        result = call(*args, **kwargs)
        if name in DB_WRITES and self._roll(self.rates.db_error / 2, rng):
            self.injected["db answer lost"] += 1
            raise RetryableError("control-plane database unavailable: connection lost after the write")
        return result


def faulty_store(store: ControlPlane, faults: SimFaults) -> ControlPlane:
    """``store`` with `DB_CALLS` going through ``faults`` (instance attributes shadow the methods)."""
    for name in DB_CALLS + LATER_DB_CALLS:
        original = getattr(store, name)
        setattr(store, name, functools.partial(faults.db_call, name, original))
    return store


class FaultyLeases(Leases):
    """Leases whose calls die with the worker, and may hit a database error."""

    def __init__(self, leases: Leases, faults: SimFaults) -> None:
        super().__init__(leases.engine, ttl_ms=leases.ttl_ms)
        self.faults = faults

    def claim(self, export_id: str, holder: str, now_ms: int) -> bool:
        return bool(self.faults.db_call("claim", super().claim, export_id, holder, now_ms))

    def renew(self, export_id: str, holder: str, now_ms: int) -> bool:
        return bool(self.faults.db_call("renew", super().renew, export_id, holder, now_ms))

    def release(self, export_id: str, holder: str) -> None:
        if self.faults.dead:
            raise SimCrash("release")
        super().release(export_id, holder)
