"""A batched run worker in its own process, so a test can SIGKILL it while it holds many leases.

``python -m seqexport_dagster_tests.support.batch_worker CONTROL_URL SOURCE_URL DAY NOW_MS HOLDER EXPORT_ID...``;
the credential keys come from ``SEQEXPORT_SECRET_KEYS``. Every PUT sleeps 50 ms (a slow store), so
the worker is mid-window in every export when it is killed. Prints ``started`` once it runs.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import time
from typing import Any

from seqexport_dagster.delivery.assembly import control_plane_at, source_at
from seqexport_dagster.delivery.batch import BatchRunner
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.destination.factory import open_destination
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.store.lease import Leases

PART_LIMIT = 5


def slow_destination(config: Any, policy: OperatorPolicy) -> Any:
    destination = open_destination(config, policy)
    put = destination.put

    def slow_put(key: str, body: bytes, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)
        return put(key, body, *args, **kwargs)

    destination.put = slow_put  # type: ignore[method-assign]
    return destination


def main(argv: list[str]) -> int:
    control, source, day, now_ms, holder, *export_ids = argv
    store = control_plane_at(control, os.environ["SEQEXPORT_SECRET_KEYS"])
    reader = source_at(source)

    def make_runner(**kwargs: Any) -> Runner:
        policy = OperatorPolicy(allow_local=True)
        return Runner(store, reader, policy, clock=lambda: int(now_ms), part_limit=PART_LIMIT,
                      destination_factory=slow_destination, **kwargs)  # fmt: skip

    batch = BatchRunner(
        make_runner, store, Leases(store.engine), holder=holder, clock=lambda: int(now_ms), workers=len(export_ids)
    )
    print("started", flush=True)  # noqa: T201 - the test waits for this line
    report = batch.run(export_ids, [dt.date.fromisoformat(day)], ["email_events"], run_id=holder, rewrite=False)
    print(report.summary(), flush=True)  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
