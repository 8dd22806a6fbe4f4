"""One simulated world: exports, the scheduler loop, operations and faults, all from one seed.

The loop does what the scheduler sensor and its runs do, with the same functions: every tick it
reads the exports, asks `planner.due_work` (busy: live writer leases; unfinished attempts from
`store.fleet`), cuts `planner.batch`, and runs each batch through `day_run.deliver_day`, the
scheduled run's policy that `defs.assets.deliver` calls (`BatchRunner.run` with reconciliation at
the operator's lateness as ``after_export``, and the run log). Operations go through `api.Exports`
and `backfill.backfill` (what the CLI and HTTP API call); a backfill with replace through
`BatchRunner.run(rewrite=True, replace=True)` (a UI backfill tagged ``seqexport/replace``).

Time is the world's `Clock`; the batch runs' in-run retry sleeps advance it, reconciliation's and
`backfill.backfill`'s take no time (`World._no_wait`, `World._no_backfill_wait`). One worker thread per run, so the order of every call (and of
every draw from the world's `random.Random`) is fixed by the seed.

The file format of each export (gzip JSONL or Parquet), format changes and deletes are drawn from
streams of their own (``Random(f"{seed}/format")``, ``Random(f"{seed}/delete")``; the faults of the
control-plane calls added since, `faults.LATER_DB_CALLS`, from ``Random(f"{seed}/db")``, none with
``fault_streams=1``), added after the
world's first seeds had found bugs: the main stream draws exactly what it drew before, so a seed's
history is the same as before up to its first delete (a format changes bytes, never what is sent
when, so it leaves the history as it was); ``more`` leaves deletes out for the seeds that predate
them.

Azure exports (issue 45) are drawn from a stream of their own too (``Random(f"{seed}/azure")``, one
draw per create): an export whose first bucket is ``ord`` or ``c403`` becomes an Azure one, with its
bucket the Azure twin (`AZURE_TWINS`: a write SAS's ``azw``, a create-only SAS's ``azc``), which
answer every send as their twin does; it is created, moved and given a new SAS through the same API
as ``provider="azure"``, so the control plane, the ledger's locations and the runner see an Azure
export, while the main stream draws exactly what it drew before. ``azure=False`` leaves them out.

Bad source values (``wide=2``, `bad_values`) are drawn from ``Random(f"{seed}/badvalues")``, with the
world's part limit; ``wide=1`` leaves both out, so its seeds keep their histories.

Size: the world's state and every operation on it stay together, so the order of draws from each
stream reads in one place.
"""

from __future__ import annotations

import datetime as dt
import random
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from seqexport_dagster.contract.file_format import FORMATS, JSONL_GZ, PARQUET
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS, day_of, frequency_ms
from seqexport_dagster.delivery import planner
from seqexport_dagster.delivery.backfill import backfill
from seqexport_dagster.delivery.batch import BatchRunner, ExportOutcome
from seqexport_dagster.delivery.day_run import SCHEDULED, TRIGGER_TAG, DayRun, deliver_day
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.delivery.writer import PART_LIMIT
from seqexport_dagster.destination.azure_sas import account_endpoint
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import ExportError
from seqexport_dagster.management.api import Exports
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.source.tables import create_source_tables
from seqexport_dagster.store import ACTIVE, DELETED, PAUSED, ControlPlane
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.database import create_engine
from seqexport_dagster.store.fleet import unfinished_attempts
from seqexport_dagster.store.lease import Leases
from seqexport_dagster_tests.support.sim.bad_values import BadValues
from seqexport_dagster_tests.support.sim.bucket import (
    AZURE_CREATE,
    AZURE_WRITE,
    CREATE_ONLY_403,
    KINDS,
    ORDINARY,
    Buckets,
    SimCrash,
    destination_factory,
)
from seqexport_dagster_tests.support.sim.faults import FaultyLeases, Rates, SimFaults, faulty_store
from seqexport_dagster_tests.support.sim.model import Failure, Op, Place, SimExport, Stint
from seqexport_dagster_tests.support.sim.source import SimSource
from seqexport_dagster_tests.support.sim.templates import TEMPLATES, template
from seqexport_dagster_tests.support.sim.wide import Schedule, Storms
from seqexport_dagster_tests.support.world import DAY0, Clock

FREQUENCIES = ("15m", "1h", "6h", "6h", "24h", "24h", "24h")
OPERATIONS = (
    "pause",
    "resume",
    "move prefix",
    "move bucket",
    "new credentials",
    "rotate keys",
    "add dataset",
    "remove dataset",
    "change frequency",
    "export now",
    "export now",
    "delete",
    "backfill",
    "backfill replace",
    "revoke key",
)
#: Drawn from their own streams (`World.operate_more`), so that the main stream is what it was.
MORE_OPERATIONS = ("change format", "delete")
#: Per loop step (4 to 16 simulated minutes): about 1.1 format changes and 0.35 deletes a day.
FORMAT_CHANGE_RATE = 0.008
DELETE_RATE = 0.0025
#: Of the Parquet exports created, the share that keep a Delta table (issue 44).
TABLE_SHARE = 0.5
#: Of the exports created, the share written in Parquet (when both formats are drawn from).
PARQUET_SHARE = 0.4
#: Of the exports whose first bucket has an Azure twin, the share that are Azure exports.
AZURE_SHARE = 0.4
#: The batch runners' per-export deadline, which the product measures in real time
#: (`BatchRunner._watch`): never reached, so no export is given up, and no worker thread left
#: running beside the world's loop, however slow the host.
NO_REAL_DEADLINE_S = 1e9
#: The Azure container that answers as each S3 kind does (`bucket`'s docstring).
AZURE_TWINS = {ORDINARY: AZURE_WRITE, CREATE_ONLY_403: AZURE_CREATE}


class SimBatchRunner(BatchRunner):
    """The product's batch runner; a killed worker (`SimCrash`) ends its export's part of the run
    with nothing more written, as a dead process would (its lease is left to lapse)."""

    def _export(self, export_id: str, *args: Any, **kwargs: Any) -> ExportOutcome:
        try:
            return super()._export(export_id, *args, **kwargs)
        except SimCrash:
            return ExportOutcome(export_id, "crashed")


class World:
    def __init__(
        self,
        seed: int,
        root: Path,
        *,
        days: float = 3.0,
        control_url: str | None = None,
        source_url: str | None = None,
        level: float = 1.0,
        lateness_ms: int | None = None,
        only: Sequence[str] = (),
        exports: int | None = None,
        frequencies: Sequence[str] = FREQUENCIES,
        formats: Sequence[str] = FORMATS,
        more: Sequence[str] = MORE_OPERATIONS,
        fault_streams: int = 2,
        wide: int = 0,
        azure: bool = True,
        parquet_share: float = PARQUET_SHARE,
        table_share: float = TABLE_SHARE,
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        rng = self.rng
        self.format_rng = random.Random(f"{seed}/format")
        self.table_rng = random.Random(f"{seed}/table")
        self.delete_rng = random.Random(f"{seed}/delete")
        self.azure_rng = random.Random(f"{seed}/azure") if azure else None
        self.formats = tuple(formats)
        self.parquet_share, self.table_share = parquet_share, table_share
        self.more = set(more)  # of MORE_OPERATIONS, those drawn (seeds older than them pin theirs)
        self.clock = Clock(DAY0 + rng.randrange(0, DAY_MS))
        self.start_ms = self.clock()
        self.end_ms = self.start_ms + int(days * DAY_MS)
        self.lateness_ms = lateness_ms or rng.choice((2, 6, 6, 24)) * HOUR_MS
        self.keyspec = new_key_spec("k0")
        self.box = SecretBox.parse(self.keyspec)
        if control_url is None and TEMPLATES:
            shutil.copy(template("control"), root / "control.db")  # an empty migrated database
        if source_url is None and TEMPLATES:
            shutil.copy(template("source"), root / "source.db")
        self.engine = create_engine(control_url or f"sqlite:///{root / 'control.db'}")
        self.source_engine = create_engine(source_url or f"sqlite:///{root / 'source.db'}")
        if source_url is not None or not TEMPLATES:
            create_source_tables(self.source_engine)
        self.store = ControlPlane(self.engine, self.box)
        if control_url is not None or not TEMPLATES:
            self.store.migrate()
        self.reader = SourceReader(self.source_engine)
        self.policy = OperatorPolicy(allow_local=True)
        self.faults = SimFaults(random.Random(rng.random()), self.clock, Rates.draw(rng, level))
        # 1: the control-plane calls added since the first seeds get no faults, so a seed found
        # before they were (long run #3) replays its history as it was found.
        self.faults.later_rng = random.Random(f"{seed}/db") if fault_streams >= 2 else None
        self.buckets = Buckets()
        self.factory = destination_factory(self.buckets, self.faults, self.clock)
        self.source = SimSource(self.source_engine, random.Random(rng.random()), self.lateness_ms)
        # The widened world (issue 39, `wide`): sparse and delayed schedules, fault storms, hostile
        # values, each on a stream of its own; 0 keeps the world every older seed was found in.
        self.wide = wide
        self.schedule = Schedule(random.Random(f"{seed}/schedule")) if wide else None
        self.storms = Storms(random.Random(f"{seed}/storms")) if wide else None
        if wide:
            self.source.values_rng = random.Random(f"{seed}/values")
        # 2: also bad source values, fixed later, and the part limit they are drawn with
        # (`bad_values`); 1 keeps the widened world its seeds were found in.
        self.bad = BadValues(random.Random(f"{seed}/badvalues"), self.source_engine) if wide >= 2 else None
        self.part_limit = self.bad.part_limit if self.bad is not None else PART_LIMIT
        self.only = set(only)  # restrict operations (regression seeds name theirs)
        self.ops: list[Op] = []
        self.exports: dict[str, SimExport] = {}
        self.failures: dict[tuple[str, str], list[Failure]] = {}
        self.export_now_at: dict[str, list[int]] = {}
        #: When an operator's backfill of the export started: an explicit attempt, like export now.
        self.backfill_at: dict[str, list[int]] = {}
        self.runs = 0
        self.crashes = 0
        self.reconcile_waits = 0
        self.backfill_waits = 0
        self.ended_holders: set[str] = set()
        #: (export id, dataset) -> each complete scheduled reconciliation pass: (start, end) ms.
        self.passes: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.accounts = [f"acct{i}" for i in range(rng.randint(1, 3) if exports is None else max(1, exports // 4))]
        self._ids = (f"exp_{seed:08x}{n:08x}" for n in range(1_000_000))
        self._names = 0
        self._rebuild()
        self.frequencies = tuple(frequencies)
        for _ in range(exports or rng.randint(2, 5)):
            self.create_export()

    # -- plumbing ---------------------------------------------------------------------------------
    def _rebuild(self) -> None:
        self.store = ControlPlane(self.engine, self.box)
        run_plane = ControlPlane(self.engine, self.box)
        run_plane.mark_reconciled = self._recorded(run_plane.mark_reconciled)  # type: ignore[method-assign]
        self.run_store = faulty_store(run_plane, self.faults)
        self.leases = FaultyLeases(Leases(self.engine), self.faults)
        self.api = Exports(self.store, self.policy, clock=self.clock, destination_factory=self.factory)

    def _recorded(self, mark: Callable[[str, str, int], None]) -> Callable[[str, str, int], None]:
        """``mark_reconciled`` that also records the complete pass (its start, and the time it ended)
        for the delay oracle (`delay_oracle`); inside the fault wrapper, so a pass is recorded exactly
        when the product records it, and no fault draw moves."""

        def marked(export_id: str, dataset: str, at_ms: int) -> None:
            mark(export_id, dataset, at_ms)
            self.passes.setdefault((export_id, dataset), []).append((at_ms, self.clock()))

        return marked

    @contextmanager
    def _export_ids(self) -> Iterator[None]:
        with mock.patch("seqexport_dagster.store.exports.new_export_id", lambda: next(self._ids)):
            yield

    def make_runner(self, **kwargs: Any) -> Runner:
        kwargs.setdefault("part_limit", self.part_limit)
        return Runner(
            self.run_store, self.reader, self.policy, clock=self.clock, destination_factory=self.factory, **kwargs
        )

    def batch_runner(self, holder: str) -> SimBatchRunner:
        return SimBatchRunner(
            self.make_runner,
            self.run_store,
            self.leases,
            holder=holder,
            clock=self.clock,
            workers=1,
            deadline_s=NO_REAL_DEADLINE_S,
            sleep=lambda s: self.clock.advance(int(s * 1000)),
            holder_ended=lambda h: h in self.ended_holders,
        )

    def _no_wait(self, seconds: float) -> None:
        """Reconciliation's in-run retry waits (2 s, 4 s) take no time, neither wall time (they
        were real sleeps) nor simulated time: advancing the clock there would move every later
        draw, and so change the history every recorded seed runs. They are counted."""
        self.reconcile_waits += 1

    def _backfill_batch_runner(self, *args: Any, **kwargs: Any) -> BatchRunner:
        """`backfill()`'s own batch runner, whose in-run retry waits (2 s, 4 s) were real sleeps: a
        CI seed spent a sixth of its wall time in them. Like reconciliation's (`_no_wait`), they
        take no simulated time either (a real sleep never moved the world's clock), so every seed
        runs the history it ran with them.

        Its per-export deadline was the product's default, 900 s of real time (`time.monotonic`):
        an export past it is given up and its worker thread left running beside the world's loop,
        so the order of the world's draws, and the history, came from thread timing: CI seed 3's
        backfill at run 63, on a host stalled past it, ran another history each time
        (`test_a_seed_replays_on_a_stalled_host`). The deadline is now the world's runner's
        (`batch_runner`): never reached, whatever the host."""
        kwargs["deadline_s"] = NO_REAL_DEADLINE_S
        return BatchRunner(*args, sleep=self._no_backfill_wait, **kwargs)

    def _no_backfill_wait(self, seconds: float) -> None:
        self.backfill_waits += 1

    def log(self, export: str, what: str, outcome: str = "ok") -> None:
        self.ops.append(Op(self.clock(), export, what, outcome))

    # -- exports ----------------------------------------------------------------------------------
    def _place(self, name: str, kind: str | None = None, *, azure: Place | None = None) -> Place:
        """A new place; ``azure``: the export is an Azure one (any place of it), so a kind with an
        Azure twin becomes the twin, under the export's provider and endpoint."""
        kind = kind or self.rng.choice(KINDS)
        self._names += 1
        if azure is None:
            return Place(f"{kind}-b{self._names}", f"sim/{name}-{self._names}")
        kind = AZURE_TWINS.get(kind, kind)
        return Place(f"{kind}-b{self._names}", f"sim/{name}-{self._names}", "azure", azure.endpoint)

    def create_export(self) -> None:
        name = f"e{len(self.exports) + 1}"
        kind = self.rng.choice(KINDS)
        drawn = self.azure_rng.random() if self.azure_rng is not None else 1.0
        account = f"sim{name}"  # an Azure export's storage account
        azure = (
            Place("", "", "azure", account_endpoint(account)) if drawn < AZURE_SHARE and kind in AZURE_TWINS else None
        )
        place = self._place(name, kind, azure=azure)
        datasets = self.rng.sample(list(DATASETS), self.rng.randint(1, len(DATASETS)))
        key_id = _sas(name, 0, place.bucket) if azure else f"AKIASIM{name.upper()}K0"
        credentials: dict[str, Any] = (
            {"provider": "azure", "access_key_id": account, "secret_access_key": key_id}
            if azure
            else {
                "provider": "s3",
                "region": "us-east-1",
                "access_key_id": key_id,
                "secret_access_key": f"secret-{name}-0",
            }
        )
        fmt = self._draw_format()
        # Issue 44: a share of the Parquet exports keep a Delta table (a stream of its own: the
        # rest of a seed's history is drawn as before).
        table = "delta" if fmt == PARQUET and self.table_rng.random() < self.table_share else None
        try:
            with self._export_ids():
                record = self.api.create(
                    account_id=self.rng.choice(self.accounts),
                    bucket=place.bucket,
                    prefix=place.prefix,
                    datasets=datasets,
                    frequency=self.rng.choice(self.frequencies),
                    file_format=fmt,
                    **credentials,
                    table=table,
                )
        except ExportError as exc:
            self.log(name, "create", f"refused: {exc.message}")
            return
        sim = SimExport(name, record.id, record.account_id, key_id, [place])
        sim.table = record.table
        sim.stints = [Stint(s.dataset, s.added_at) for s in record.datasets]
        sim.formats = [(record.created_at, record.format)]
        sim.frequencies = [(record.created_at, record.frequency)]
        self.exports[name] = sim
        table_note = f" table={record.table}" if record.table else ""
        self.log(
            name, f"create {place.source} {record.frequency} {record.format}{table_note} {','.join(sorted(datasets))}"
        )

    def _draw_format(self) -> str:
        if len(self.formats) == 1:
            return self.formats[0]
        return PARQUET if self.format_rng.random() < self.parquet_share else JSONL_GZ

    def live(self) -> list[SimExport]:
        return [e for e in self.exports.values() if e.deleted_at is None]

    # -- the scheduler ----------------------------------------------------------------------------
    def scheduled_tick(self) -> None:
        """The daemon's tick at this step: every step in the first world; in the widened one only when
        its `Schedule` ticks (then perhaps a burst of ticks right after), under its fault storms."""
        if self.schedule is None or self.storms is None:
            self.tick()
            return
        self.storms.step(self.faults, self.clock())
        if not self.schedule.ticks_at(self.clock()):
            return
        self.tick()
        for gap in self.schedule.burst():
            self.clock.advance(gap)
            self.tick()

    def tick(self) -> None:
        now = self.clock()
        records = self.store.list_exports()
        busy = set(Leases(self.engine).held(now))
        items = planner.due_work(records, now, busy=busy, unfinished=unfinished_attempts(self.engine))
        for b in planner.batch(items):
            self.run_batch(b)

    def run_batch(self, b: planner.Batch) -> None:
        self.runs += 1
        holder = f"run-{self.runs:06d}"
        now_items = {i.export_id for i in b.items if i.export_now}
        self.faults.crash_armed = self.rng.random() < 0.15
        # The scheduled run's policy (which exports, reconciliation, run log) as a Dagster run decides
        # it (`delivery.day_run`, called by `defs.assets.deliver`).
        report = deliver_day(
            DayRun(holder, b.day, b.datasets, {TRIGGER_TAG: SCHEDULED}, b.export_ids, tuple(sorted(now_items))),
            store=self.store,
            batch=lambda workers, deadline_s: self.batch_runner(holder),
            lateness_ms=self.lateness_ms,
            clock=self.clock,
            reconcile_sleep=self._no_wait,
        ).report
        self.faults.crash_armed = False
        if self.faults.dead:
            self.faults.dead = False
            self.crashes += 1
            if self.rng.random() < 0.5:
                self.ended_holders.add(holder)  # Dagster saw the run end: its lease is taken over
        self._note_failures(report.outcomes)

    def _note_failures(self, export_ids: Iterable[str], *, operator: bool = False) -> None:
        by_id = {e.export_id: e for e in self.exports.values()}
        for export_id in export_ids:
            record = self.store.get_export(export_id)
            for s in record.datasets:
                seen = self.failures.setdefault((by_id[export_id].name, s.dataset), [])
                if s.failures and (not seen or seen[-1].failures != s.failures):
                    # When the product counted it (the backoff runs from there), not when the run
                    # ended: a run that went on after the failure made the next retry look early
                    # (long-run seed 10002796: 4 s later, the retry "119 min" after it at 120).
                    at = s.last_error_at if s.last_error_at is not None else self.clock()
                    seen.append(Failure(at, s.failures, frequency_ms(record.frequency), operator))
                elif not s.failures and seen and seen[-1].failures:
                    seen.append(Failure(self.clock(), 0, frequency_ms(record.frequency)))

    # -- operations -------------------------------------------------------------------------------
    def operate(self) -> None:
        live = self.live()
        if not live:
            return
        e = self.rng.choice(live)
        choices = [o for o in OPERATIONS if not self.only or o in self.only]
        if not choices:
            return
        op = self.rng.choice(choices)
        if op == "delete" and (len(live) < 3 or self.rng.random() < 0.7):
            return
        try:
            outcome = self._operate(e, op)
        except ExportError as exc:
            outcome = f"refused: {exc.message}"
        self.log(e.name, op, outcome)

    def operate_more(self) -> None:
        """The operations of their own streams (`MORE_OPERATIONS`), one draw of each per loop step."""
        change = self.format_rng.random() < FORMAT_CHANGE_RATE
        delete = self.delete_rng.random() < DELETE_RATE
        for op, drawn, rng in (("change format", change, self.format_rng), ("delete", delete, self.delete_rng)):
            live = self.live()
            if not drawn or not live or op not in self.more or (self.only and op not in self.only):
                continue
            if (op == "change format" and len(self.formats) < 2) or (op == "delete" and len(live) < 2):
                continue  # a world keeps one export at least
            e = rng.choice(live)
            try:
                outcome = self._operate(e, op)
            except ExportError as exc:
                outcome = f"refused: {exc.message}"
            self.log(e.name, op, outcome)

    def _operate(self, e: SimExport, op: str) -> str:
        eid, now = e.export_id, self.clock()
        if op == "pause":
            self.api.pause(eid)
        elif op == "resume":
            self.api.resume(eid)
        elif op in ("move prefix", "move bucket"):
            azure = e.place if e.place.provider == "azure" else None
            drawn = self._place(e.name, azure=azure)
            place = (
                Place(e.place.bucket, drawn.prefix, e.place.provider, e.place.endpoint)
                if op == "move prefix"
                else drawn
            )
            self.api.change_destination(eid, bucket=place.bucket, prefix=place.prefix)
            e.places.append(place)
            e.moves += 1
            return f"now {place.source}"
        elif op == "new credentials":
            e.keys += 1
            if e.place.provider == "azure":  # a new SAS token for the same account
                e.key_id = _sas(e.name, e.keys, e.place.bucket)
                self.api.change_destination(eid, secret_access_key=e.key_id)
                return "ok"
            e.key_id = f"AKIASIM{e.name.upper()}K{e.keys}"
            self.api.change_destination(eid, access_key_id=e.key_id, secret_access_key=f"secret-{e.name}-{e.keys}")
        elif op == "rotate keys":
            spec = new_key_spec(f"k{self.rng.randrange(1, 10**6)}")
            self.box = SecretBox.parse(f"{spec},{self.keyspec}")
            self.keyspec = spec
            self._rebuild()
            report = self.api.rotate_keys()
            return f"re-sealed {report}"
        elif op == "add dataset":
            missing = [d for d in DATASETS if e.stint(d) is None]
            if not missing:
                return "nothing to add"
            name = self.rng.choice(missing)
            record = self.api.add_datasets(eid, [name])
            state = record.dataset_state(name)
            assert state is not None
            e.stints.append(Stint(name, state.added_at))
            return name
        elif op == "remove dataset":
            present = [s for s in e.stints if s.ended_at is None]
            if len(present) < 2:
                return "only one dataset"
            stint = self.rng.choice(present)
            state = self.store.get_export(eid).dataset_state(stint.dataset)
            self.api.remove_datasets(eid, [stint.dataset])
            stint.ended_at, stint.end_position = now, state.position_ms if state else None
            return stint.dataset
        elif op == "change frequency":
            frequency = self.rng.choice(self.frequencies)
            self.api.change_frequency(eid, frequency)
            e.frequencies.append((now, frequency))
            return frequency
        elif op == "change format":
            current = self.store.get_export(eid).format
            fmt = next(f for f in self.formats if f != current) if current in self.formats else self.formats[0]
            self.api.change_format(eid, fmt)
            e.formats.append((now, fmt))
            return fmt
        elif op == "export now":
            self.api.export_now(eid)
            self.export_now_at.setdefault(e.name, []).append(now)
        elif op == "delete":
            record = self.store.get_export(eid)
            self.api.delete(eid)
            e.deleted_at = now
            for s in e.stints:
                if s.ended_at is None:
                    state = record.dataset_state(s.dataset)
                    s.ended_at, s.end_position = now, state.position_ms if state else None
        elif op in ("backfill", "backfill replace"):
            return self._backfill(e, replace=op == "backfill replace")
        elif op == "revoke key":
            until = now + self.rng.randrange(10 * MINUTE_MS, 8 * HOUR_MS)
            self.faults.revoke(e.key_id, until)
            return f"for {(until - now) // MINUTE_MS} min"
        return "ok"

    def _backfill(self, e: SimExport, *, replace: bool) -> str:
        e.backfilled_after_move = e.backfilled_after_move or len(e.places) > 1
        self.backfill_at.setdefault(e.name, []).append(self.clock())
        today = day_of(self.clock())
        first = max(day_of(self.start_ms), today - dt.timedelta(days=self.rng.randint(0, 3)))
        last = min(today, first + dt.timedelta(days=self.rng.randint(0, 1)))
        if replace:
            batch = self.batch_runner(f"backfill-{self.runs}")
            for day in _days(first, last):
                batch.run([e.export_id], [day], tuple(DATASETS), run_id="backfill", rewrite=True, replace=True)
                e.replaced_days.add(day.isoformat())
        else:
            with (
                mock.patch("seqexport_dagster.delivery.backfill.Runner", _runner_with(self.factory, self.part_limit)),
                mock.patch("seqexport_dagster.delivery.backfill.BatchRunner", self._backfill_batch_runner),
            ):
                backfill(self.run_store, self.reader, self.policy, [e.export_id], first.isoformat(),
                         last.isoformat(), clock=self.clock, holder=f"backfill-{self.runs}")  # fmt: skip
        self._note_failures([e.export_id], operator=True)
        return f"{first}..{last}"

    # -- the end ----------------------------------------------------------------------------------
    def quiet(self) -> None:
        """Faults stop, paused exports resume: what follows is the documented horizon's drain."""
        self.faults.enabled = False
        self.faults.revoked_until.clear()
        if self.storms is not None:
            self.storms.end(self.faults)
        for e in self.live():
            if self.store.get_export(e.export_id).status == PAUSED:
                self.api.resume(e.export_id)
                self.log(e.name, "resume (quiet end)")

    def spoil(self, *, quiet: bool) -> None:
        """Bad source values (``wide=2``, `bad_values`): fix those due, perhaps spoil a row."""
        if self.bad is not None:
            self.bad.step(self, self.clock(), quiet=quiet)

    def statuses(self) -> dict[str, str]:
        return {e.name: self.store.get_export(e.export_id).status for e in self.exports.values()}

    def dispose(self) -> None:
        self.engine.dispose()
        self.source_engine.dispose()


def _days(first: dt.date, last: dt.date) -> list[dt.date]:
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


def _runner_with(factory: Any, part_limit: int) -> Any:
    """`backfill.backfill` builds its runners itself; this one writes through the simulated store."""

    def make(*args: Any, **kwargs: Any) -> Runner:
        kwargs.setdefault("destination_factory", factory)
        kwargs.setdefault("part_limit", part_limit)
        return Runner(*args, **kwargs)

    return make


__all__ = ["ACTIVE", "DELETED", "World"]


def _sas(name: str, n: int, container: str) -> str:
    """The Azure export's SAS token (its shape only: the simulated store checks no signature): create
    only on a create-only container, create and write on a write one."""
    permissions = "c" if container.startswith(AZURE_CREATE) else "cw"
    return f"sv=2021-08-06&sr=c&sp={permissions}&se=2099-12-31&sig=sim{name}k{n}"
