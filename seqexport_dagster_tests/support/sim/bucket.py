"""The simulated object store: in-memory buckets with each provider's write semantics, and the
`Destination` the runner writes through (plugged in through the product's destination factory).

Four kinds of bucket, chosen by the bucket name's first segment:
- ``ord``: an ordinary S3 bucket with ``If-None-Match: *`` (a 412 when the key exists; a plain PUT
  overwrites);
- ``c412``: create-only with a precondition (GCS Storage Object Creator): 412 to a conditional
  create of an existing key, 403 to a plain PUT on one;
- ``c403``: create-only without precondition support (a create-only bucket policy on a store that
  ignores the header): every write to an existing key answers 403;
- ``nopre``: an ordinary store without preconditions (every PUT overwrites).

and two Azure Blob containers (issue 45), the twins of ``ord`` and ``c403`` that Azure exports draw
(`world.AZURE_TWINS`):
- ``azw``: a write SAS (``sp=cw``): ``If-None-Match: *`` answers 409 on an existing blob (existed);
  a plain Put Blob overwrites;
- ``azc``: a create-only SAS (``sp=c``): Azure checks the permission before the precondition, so
  every write to an existing blob answers 403 (AuthorizationPermissionMismatch), with the header
  or without (as Azurite does; `test_azure`).

`SimDestination.put` models `S3Destination.put`, botocore's three sends included: each send may be
hit by a fault (`SimFaults`), a reply lost after the object landed is sent again, and the store's
answer to that re-send (412, an overwrite, or a 403) reaches the runner as the real one would.
Every send that reaches a bucket is in its write log, which the oracles read.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from seqexport_dagster.destination.base import Destination, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import AccessDenied, EndpointTooSlow, RetryableError

if TYPE_CHECKING:
    from seqexport_dagster_tests.support.sim.faults import SimFaults

ORDINARY: Final = "ord"
CREATE_ONLY_412: Final = "c412"
CREATE_ONLY_403: Final = "c403"
NO_PRECONDITION: Final = "nopre"
KINDS: Final = (ORDINARY, CREATE_ONLY_412, CREATE_ONLY_403, NO_PRECONDITION)
AZURE_WRITE: Final = "azw"
AZURE_CREATE: Final = "azc"
AZURE_KINDS: Final = (AZURE_WRITE, AZURE_CREATE)
#: botocore's standard retry mode, as the product configures it.
SENDS_PER_PUT: Final = 3


def kind_of(bucket: str) -> str:
    kind = bucket.split("-", 1)[0]
    if kind not in KINDS + AZURE_KINDS:
        raise ValueError(f"simulated bucket {bucket!r} does not start with one of {KINDS + AZURE_KINDS}")
    return kind


@dataclass(frozen=True, slots=True)
class Write:
    """One send that reached the store, and its answer."""

    seq: int
    at_ms: int
    key: str
    answer: str  # created, existed (412), denied (403), overwritten
    conditional: bool
    plain_intended: bool  # the caller asked for create_only=False (an operator's replace)
    same_body: bool


@dataclass
class MemoryBucket:
    name: str
    objects: dict[str, bytes] = field(default_factory=dict)
    writes: list[Write] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    #: Keys overwritten on purpose (an operator's replace): the Snowpipe oracle leaves their windows out.
    replaced_on_purpose: set[str] = field(default_factory=set)
    #: When each key's current body landed; and for each row of a body an operator's replace
    #: overwrote, when that body had landed (the delay oracle: the loaders see only the new body).
    body_at: dict[str, int] = field(default_factory=dict)
    overwritten_rows: dict[str, int] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return kind_of(self.name)

    @property
    def preconditions(self) -> bool:
        return self.kind in (ORDINARY, CREATE_ONLY_412, *AZURE_KINDS)

    @property
    def create_only(self) -> bool:
        return self.kind in (CREATE_ONLY_412, CREATE_ONLY_403, AZURE_CREATE)

    def send(self, key: str, body: bytes, *, conditional: bool, plain: bool, seq: int, now_ms: int) -> str:
        """One request reaching the store: ``created``, ``existed``, ``denied`` or ``overwritten``."""
        old = self.objects.get(key)
        same = old == body
        if old is None:
            if not plain:
                # An operator's replace of a snapshot day rewrites its parts under the day's
                # `_SUCCESS` and writes the marker again last; one of a day that grew past the parts
                # it had creates the parts it lacks there too (seed 56000012, small parts).
                self._check_success_last(key)
            self.objects[key] = body
            self.body_at[key] = now_ms
            answer = "created"
        elif self.kind == AZURE_CREATE:  # the SAS's permission is checked before the precondition
            answer = "denied"
            if not same and not plain:
                self.violations.append(f"a different body was sent under existing key {key}")
        elif conditional:
            answer = "existed"
        elif self.create_only:
            answer = "denied"
            if self.kind == CREATE_ONLY_412 and not plain:
                self.violations.append(f"a PUT without precondition reached existing key {key} on a create-only store")
            if not same and not plain:
                self.violations.append(f"a different body was sent under existing key {key}")
        else:
            if plain and not same:
                self._remember_rows(key, old)
            self.objects[key] = body
            self.body_at[key] = now_ms
            answer = "overwritten"
            if plain:
                self.replaced_on_purpose.add(key)
            elif not same:
                self.violations.append(f"object {key} was replaced by a different body")
        self.writes.append(Write(seq, now_ms, key, answer, conditional, plain, same))
        return answer

    def _remember_rows(self, key: str, body: bytes) -> None:
        if not key.endswith((".jsonl.gz", ".parquet")):
            return
        from seqexport_dagster_tests.support.sim.loaders import ids_of  # it imports this module

        try:
            ids = ids_of(key, body)
        except Exception:  # an unreadable body carried no row a loader could load
            return
        for rid in ids:
            self.overwritten_rows.setdefault(rid, self.body_at.get(key, 0))

    def _check_success_last(self, key: str) -> None:
        folder, _, name = key.rpartition("/")
        if "/subscribers/date=" not in f"/{folder}" or name == "_SUCCESS":
            return
        if f"{folder}/_SUCCESS" in self.objects:
            self.violations.append(f"part {key} was written after {folder}/_SUCCESS")


class Buckets:
    """Every simulated bucket by name, and the sequence number of writes across them."""

    def __init__(self) -> None:
        self.by_name: dict[str, MemoryBucket] = {}
        self.seq = 0
        self.sends: dict[str, int] = {}  # bucket -> requests sent to it

    def get(self, name: str) -> MemoryBucket:
        kind_of(name)
        return self.by_name.setdefault(name, MemoryBucket(name))

    def violations(self) -> list[str]:
        return [f"{b.name}: {v}" for b in self.by_name.values() for v in b.violations]


class SimCrash(BaseException):
    """The run worker was killed (in-process: nothing of it writes anything after this)."""


class SimDestination:
    """A `Destination` over a `MemoryBucket`, with the S3 destination's retries and answers."""

    def __init__(
        self, config: DestinationConfig, buckets: Buckets, faults: SimFaults, clock: Callable[[], int]
    ) -> None:
        self.config = config
        self.bucket = buckets.get(config.bucket)
        self.buckets = buckets
        self.faults = faults
        self.clock = clock
        self.preconditions = self.bucket.preconditions
        # What "revoke key" revokes: the access key, or an Azure export's SAS token.
        self.key_id = (config.secret_access_key if config.provider == "azure" else config.access_key_id) or ""
        self.scheme = "az" if config.provider == "azure" else "s3"

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        conditional = create_only and self.preconditions
        where = f"{self.scheme}://{self.bucket.name}"
        for send in range(1, SENDS_PER_PUT + 1):
            last = send == SENDS_PER_PUT
            fault = self.faults.before_send(self.bucket.name, self.key_id, key)
            self.buckets.sends[self.bucket.name] = self.buckets.sends.get(self.bucket.name, 0) + 1
            if fault == "crash":
                raise SimCrash(key)
            if fault == "revoked":
                denied = AccessDenied(f"access denied for s3:PutObject on {where}/{key} (the key was revoked)")
                denied.outcome_unknown = send > 1
                raise denied
            if fault in ("5xx", "reset"):
                if last:
                    raise RetryableError(f"{where}: {'503 SlowDown' if fault == '5xx' else 'connection reset'}")
                continue
            self.buckets.seq += 1
            answer = self.bucket.send(
                key, body, conditional=conditional, plain=not create_only, seq=self.buckets.seq, now_ms=self.clock()
            )
            after = self.faults.after_send(self.bucket.name, key)
            if after == "crash":
                raise SimCrash(key)
            if after == "slow":
                raise EndpointTooSlow(f"{where}: did not finish answering within the request deadline")
            if after == "lost":
                if last:
                    raise RetryableError(f"{where}: connection reset while reading the answer")
                continue
            if answer == "existed":
                return PutOutcome.EXISTED
            if answer == "denied":
                denied = AccessDenied(f"access denied for s3:PutObject on {where}/{key}")
                denied.outcome_unknown = send > 1
                raise denied
            return PutOutcome.CREATED
        raise AssertionError("unreachable")  # pragma: no cover

    def describe(self) -> str:
        return f"{self.scheme}://{self.bucket.name}/{self.config.prefix}".rstrip("/")

    def close(self) -> None:
        return None


def destination_factory(
    buckets: Buckets, faults: SimFaults, clock: Callable[[], int]
) -> Callable[[DestinationConfig, OperatorPolicy], Destination]:
    def factory(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        return SimDestination(config, buckets, faults, clock)

    return factory


def md5_hex(body: bytes) -> str:
    return hashlib.md5(body, usedforsecurity=False).hexdigest()
