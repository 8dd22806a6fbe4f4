"""Building blocks shared by the fault suite and the soak: S3 exports behind the proxy, runners with
test-sized timeouts, and the outcome table."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.destination.base import Destination
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3 import S3Destination
from seqexport_dagster.store import ExportRecord
from seqexport_dagster_tests.support.faults.proxy import FaultProxy

ACCESS_KEY = "AKIAFAULTSUITE000001"
SECRET_KEY = "fault-suite-secret-never-printed-0001"


def new_bucket(s3: Any) -> str:
    name = f"faults-{secrets.token_hex(6)}"
    s3.create_bucket(Bucket=name)
    return name


def s3_export(
    world: Any,
    s3: Any,
    proxy: FaultProxy,
    *,
    account_id: str = "acme",
    datasets: tuple[str, ...] = ("email_events", "sms_events", "custom_events"),
    frequency: str = "1h",
    prefix: str = "sequenzy",
    bucket: str | None = None,
    file_format: str = "jsonl.gz",
) -> ExportRecord:
    """An export to a fresh moto bucket, reached through the proxy (a loopback endpoint).

    Behind a write-once proxy the export is a GCS one (HMAC key, Storage Object Creator): its
    create-only writes carry ``x-goog-if-generation-match: 0``; otherwise ``If-None-Match: *``.
    """
    gcs = proxy.write_once
    return world.store.create_export(  # type: ignore[no-any-return]
        account_id=account_id,
        destination=DestinationConfig(
            "gcs" if gcs else "s3",
            bucket or new_bucket(s3),
            prefix=prefix,
            region="auto" if gcs else "us-east-1",
            endpoint=proxy.endpoint,
            access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY,
        ),
        datasets=datasets,
        frequency=frequency,
        lag_ms=120_000,
        now_ms=world.clock(),
        file_format=file_format,
    )


def destination_factory(
    *, read_timeout: float = 5.0, connect_timeout: float = 2.0, max_attempts: int = 3
) -> Callable[[DestinationConfig, OperatorPolicy], Destination]:
    """The production S3 destination with test-sized timeouts (the defaults are 10 s / 60 s)."""

    def factory(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        return S3Destination(
            config, policy, read_timeout=read_timeout, connect_timeout=connect_timeout, max_attempts=max_attempts
        )

    return factory


def s3_runner(world: Any, *, part_limit: int = 50_000, **factory_kw: Any) -> Runner:
    return world.runner(part_limit=part_limit, destination_factory=destination_factory(**factory_kw))  # type: ignore[no-any-return]


@dataclass
class Outcome:
    scenario: str
    faults: str
    expected: int
    found: int
    duplicated: int
    recovery_s: float
    backoff: str = "-"  # simulated wait the scheduler imposed before the successful retry
    bucket: str = "plain"  # or "write-once" (GCS Storage Object Creator)
    kept: int = 0  # rows erased from the source after their part landed, still in that file
    overwrites: int = 0  # PUTs without precondition to a name that existed
    recognised: int = 0  # PUTs answered 412: a part an earlier send had landed
    file_format: str = "jsonl.gz"  # the export's part format: jsonl.gz or parquet


class Stopwatch:
    """Wall time from the first fault to the clean rewrite."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.end: float | None = None

    def stop(self) -> None:
        """Call when the export has recovered, before the audit (which is not recovery time)."""
        self.end = time.monotonic()

    def seconds(self) -> float:
        return round((self.end or time.monotonic()) - self.start, 2)


def format_table(outcomes: list[Outcome]) -> str:
    head = (
        "scenario",
        "bucket",
        "format",
        "faults injected",
        "expected",
        "found",
        "dup",
        "erased, kept",
        "overwrites",
        "412",
        "recovery (wall)",
        "backoff (sim)",
    )
    rows = [
        (
            o.scenario,
            o.bucket,
            o.file_format,
            o.faults,
            str(o.expected),
            str(o.found - o.kept),
            str(o.duplicated),
            str(o.kept),
            str(o.overwrites),
            str(o.recognised),
            f"{o.recovery_s:.2f} s",
            o.backoff,
        )
        for o in outcomes
    ]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |"
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join([line, rule, *body])


def minutes(ms: int | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 60_000:g} min"
