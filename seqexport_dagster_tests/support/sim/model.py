"""What the simulator remembers about its exports, independently of the product: every location an
export has written to, every stint of each dataset (added → removed), the operations and their
outcomes, and the failures seen after each scheduled run (for the backoff oracle)."""

from __future__ import annotations

from dataclasses import dataclass, field

from seqexport_dagster.store import location_of


@dataclass(frozen=True, slots=True)
class Place:
    bucket: str
    prefix: str
    #: The export's provider there, and its endpoint as the control plane stores it (an Azure
    #: export's is its account's): both are part of the ledger's location fingerprint.
    provider: str = "s3"
    endpoint: str | None = None

    @property
    def location(self) -> str:
        return location_of(self.provider, self.endpoint, self.bucket, self.prefix)

    @property
    def source(self) -> str:
        """The simulator's own name of the place (the loaders' and the oracles' messages)."""
        return f"s3://{self.bucket}/{self.prefix}"

    @property
    def url(self) -> str:
        """What a customer gives `verify` for it: ``az://`` for an Azure export's container, so that
        ``verify --ledger`` matches the ledger's Azure locations (`verify.ledger_scope`)."""
        return f"az://{self.bucket}/{self.prefix}" if self.provider == "azure" else self.source


@dataclass
class Stint:
    dataset: str
    added_at: int
    ended_at: int | None = None
    end_position: int | None = None


@dataclass
class SimExport:
    name: str  # e1, e2... (the simulator's own, stable across runs of a seed)
    export_id: str
    account_id: str
    #: The access key id (s3), or the SAS token (azure): what a "revoke key" fault revokes.
    key_id: str
    places: list[Place]
    stints: list[Stint] = field(default_factory=list)
    deleted_at: int | None = None
    moves: int = 0
    keys: int = 0
    replaced_days: set[str] = field(default_factory=set)
    #: A backfill ran after a move: see `oracles.Oracles.verify` (verify's view of that place).
    backfilled_after_move: bool = False
    #: (since ms, format): the export's file format from each time on (create, then every change).
    formats: list[tuple[int, str]] = field(default_factory=list)
    #: (since ms, frequency): the export's frequency from each time on (create, then every change).
    frequencies: list[tuple[int, str]] = field(default_factory=list)

    def frequency_at(self, at_ms: int) -> str:
        current = self.frequencies[0][1]
        for since, frequency in self.frequencies:
            if since <= at_ms:
                current = frequency
        return current

    #: "delta": the export keeps a Delta table per dataset (issue 44; `table_oracle`).
    table: str | None = None

    @property
    def place(self) -> Place:
        return self.places[-1]

    def formats_between(self, first_ms: int, last_ms: int) -> set[str]:
        """Every format the export had at some time in [first_ms, last_ms]."""
        at_first = [f for t, f in self.formats if t <= first_ms][-1:] or [self.formats[0][1]]
        return set(at_first) | {f for t, f in self.formats if first_ms < t <= last_ms}

    def stint(self, dataset: str) -> Stint | None:
        open_ = [s for s in self.stints if s.dataset == dataset and s.ended_at is None]
        return open_[-1] if open_ else None


@dataclass(frozen=True, slots=True)
class Op:
    at_ms: int
    export: str
    what: str
    outcome: str

    def line(self) -> str:
        from seqexport_dagster.contract.window import iso_ms

        return f"{iso_ms(self.at_ms)} {self.export} {self.what}: {self.outcome}"


@dataclass
class Failure:
    """A failure counted for (export, dataset), seen after a scheduled run or an operator's backfill,
    at the time the product recorded it (``last_error_at``); a recovery at the time it was seen."""

    at_ms: int
    failures: int
    frequency_ms: int
    #: Counted by a backfill (an operator's request, run when launched: not a retry backoff spaces).
    operator: bool = False
