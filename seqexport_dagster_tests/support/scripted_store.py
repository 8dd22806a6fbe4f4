"""A `Destination` over one simulated bucket (`sim.bucket.MemoryBucket`: each provider's write
semantics, and a log of every send that flags a replaced object), whose next write of a named
object can be scripted to fail: for tests that drive the real runner into one exact fault."""

from __future__ import annotations

import datetime as dt

from seqexport_dagster.destination.base import PutOutcome
from seqexport_dagster.errors import AccessDenied, EndpointTooSlow, RetryableError
from seqexport_dagster_tests.support.sim.bucket import MemoryBucket, SimCrash


class ScriptedStore:
    """One simulated bucket behind the runner; ``faults`` maps a key's name to what happens to its
        next write: ``lost`` (it lands, the answer does not come back), ``slow`` (it lands, the answer
        comes after the deadline), ``lost-then-denied`` (it lands, the answer is lost and the re-send is
    refused with a 403), ``crash`` (it lands, and the worker is killed), ``reset`` (the connection drops before it is sent) or
    ``denied`` (a definite 403, nothing lands)."""

    def __init__(self, kind: str, prefix: str = "") -> None:
        self.bucket = MemoryBucket(f"{kind}-b1")
        self.prefix = prefix  # of the keys the runner sends here ("moved/": an export moved to it)
        self.preconditions = self.bucket.preconditions
        self.faults: dict[str, str] = {}

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        fault = self.faults.pop(key.rsplit("/", 1)[-1], None)
        if fault == "reset":
            raise RetryableError("connection reset")
        if fault == "denied":  # refused before anything landed (a bucket policy, a definite 403)
            raise AccessDenied(f"access denied for s3:PutObject on {key}")
        conditional = create_only and self.preconditions
        answer = self.bucket.send(key, body, conditional=conditional, plain=not create_only, seq=0, now_ms=0)
        if fault == "crash":  # the worker is killed once the object has landed
            raise SimCrash(key)
        if fault == "lost":
            raise RetryableError("connection reset while reading the answer")
        if fault == "slow":
            raise EndpointTooSlow("did not finish answering within the request deadline")
        if fault == "lost-then-denied":  # botocore's re-send of a plain PUT, refused by a create-only policy
            denied = AccessDenied(f"access denied for s3:PutObject on {key}")
            denied.outcome_unknown = True
            raise denied
        if answer == "existed":
            return PutOutcome.EXISTED
        if answer == "denied":
            raise AccessDenied(f"access denied for s3:PutObject on {key}")
        return PutOutcome.CREATED

    def describe(self) -> str:
        return f"s3://{self.bucket.name}"

    def close(self) -> None:
        return None

    def day(self, day: dt.date) -> dict[str, bytes]:
        folder = f"subscribers/date={day.isoformat()}/"
        return {k: b for k, b in self.bucket.objects.items() if k.startswith(self.prefix + folder)}
