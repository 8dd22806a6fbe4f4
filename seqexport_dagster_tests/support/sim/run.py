"""Running one seed: the world's days (source fed, operations, faults, scheduler ticks), the oracles
after every simulated day, then the quiet end (faults stop, paused exports resume, the documented
horizon passes) and the final checks. A failing seed comes back with the command that reproduces
it and a trace of what happened to the row or object that broke the invariant."""

from __future__ import annotations

import hashlib
import re
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster.store.maintenance import maintain
from seqexport_dagster_tests.support.sim.oracles import Oracles, Violation
from seqexport_dagster_tests.support.sim.trace import trace
from seqexport_dagster_tests.support.sim.world import World


@dataclass
class SimResult:
    seed: int
    days: float
    export_days: float = 0.0
    rows: int = 0
    rows_checked: int = 0
    runs: int = 0
    crashes: int = 0
    ops: Counter[str] = field(default_factory=Counter)
    #: Exports created, by file format; parts that `verify` (the oracle) read, by file format.
    formats: Counter[str] = field(default_factory=Counter)
    #: Exports created, by provider (s3, azure).
    providers: Counter[str] = field(default_factory=Counter)
    verified_parts: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    violations: list[Violation] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    command: str = ""
    #: With ``maintain_every_ms``: the passes of `seqexport maintain` run between ticks, and what they removed.
    maintenance_passes: int = 0
    maintenance: Counter[str] = field(default_factory=Counter)
    #: The widened world (``wide=1``): its schedule regime, daemon outages, fault storms, ticks the
    #: daemon did not make, and hostile source values the value oracle read back.
    schedule: str = ""
    outages: int = 0
    storms: int = 0
    skipped_ticks: int = 0
    hostile_rows: int = 0
    #: ``wide=2``: bad source values written and fixed (`bad_values`), the part limit drawn, and the
    #: windows the oracle saw refused with `UntypeableValue`, by file format (of them, after parts
    #: of the window had landed).
    bad_values: int = 0
    bad_fixed: int = 0
    part_limit: int = 0
    bad_refused: Counter[str] = field(default_factory=Counter)
    bad_after_part: Counter[str] = field(default_factory=Counter)
    #: Late rows whose delivery time the delay oracle checked, the largest delay after visibility
    #: (ms), and the rows it did not time, by reason (`delay_oracle`).
    late_timed: int = 0
    late_worst_ms: int = 0
    late_untimed: Counter[str] = field(default_factory=Counter)
    #: Issue 44: exports that kept a Delta table; tables and rows the table oracle read with delta-rs.
    tabled: int = 0
    #: Export-days of exports while they kept a Delta table (the issue's "export-days with tables on").
    table_export_days: float = 0.0
    tables_read: int = 0
    table_rows_read: int = 0
    duckdb_tables: int = 0
    #: Table-only files written for parts stranded at a place the export left (`TableOracle`).
    table_only_files: int = 0
    #: Of those, the files of windows whose replace at an earlier place did not finish.
    table_replaced_files: int = 0
    #: Rows the table oracle let pass as a documented limit (docs/customers.md, "Delta tables"), by case.
    table_known: Counter[str] = field(default_factory=Counter)
    #: A digest of the history the seed ran (`history_digest`): two runs of a seed ran the same
    #: history when these are equal.
    history: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def summary(self) -> str:
        head = (
            f"seed {self.seed}: {self.export_days:.1f} export-days, {self.rows} rows ({self.rows_checked} checked), "
            f"{self.runs} runs, {self.crashes} crashes, {sum(self.faults.values())} faults, "
            f"{sum(self.ops.values())} operations, {self.formats['parquet']} of {sum(self.formats.values())} exports "
            f"in Parquet, {self.tabled} with a Delta table ({self.tables_read} delta-rs reads, "
            f"{self.table_rows_read} rows; {self.duckdb_tables} DuckDB reads), {self.cpu_s:.1f} CPU-s: "
        )
        if self.ok:
            return head + "ok"
        kinds = Counter(v.invariant for v in self.violations)
        lines = [head + ", ".join(f"{n} {k}" for k, n in kinds.items()), f"  reproduce: {self.command}"]
        # A run of the command ran the same history if it prints the same digest (a fork under load).
        lines += [f"  history: {self.history[:16]}"] if self.history else []
        lines += [f"  {v.line()}" for v in self.violations[:8]]
        lines += self.traces
        return "\n".join(lines)


def simulate(
    seed: int,
    root: Path | None = None,
    *,
    days: float = 3.0,
    stop_at_first: bool = True,
    maintain_every_ms: int | None = None,
    **world_kw: Any,
) -> SimResult:
    """Run ``seed`` for ``days`` simulated days plus the quiet end; see the module docstring.

    ``maintain_every_ms``: also run the control plane's maintenance (what `seqexport maintain` and
    the Dagster schedule run) between ticks that often, through faults, crashes and operations alike;
    the oracles then check that it lost nothing (issue 23)."""
    if root is None:
        with tempfile.TemporaryDirectory(prefix="seqexport-sim-") as tmp:
            return simulate(
                seed, Path(tmp), days=days, stop_at_first=stop_at_first, maintain_every_ms=maintain_every_ms, **world_kw
            )
    began = time.process_time()
    world = World(seed, root, days=days, **world_kw)
    result = SimResult(seed, days, command=_command(seed, days, world_kw))
    oracles = Oracles()
    try:
        next_day = world.start_ms + DAY_MS
        end_ms = world.end_ms
        quiet_until = end_ms + world.lateness_ms + DAY_MS + 7 * HOUR_MS
        next_maintenance = world.start_ms + (maintain_every_ms or 0)
        quieted = False
        while world.clock() < quiet_until:
            before = world.clock()
            world.clock.advance(world.rng.randrange(4 * MINUTE_MS, 16 * MINUTE_MS))
            quiet = before >= end_ms
            # Not "before < end_ms": a burst of ticks (the widened world) may carry the clock past the
            # end inside a step (long run seed 20000041: a paused export never resumed, faults never stopped).
            crossing = not quieted and world.clock() >= end_ms
            if crossing:
                quieted = True
                world.quiet()
            world.source.feed(world.accounts, world.clock(), before) if not quiet else None
            world.spoil(quiet=quiet)  # its own stream; fixes go on through the quiet end
            if not quiet:  # before the main stream's operation: a backfill then writes in the new format
                world.operate_more()
            if not quiet and world.rng.random() < 0.06:
                world.operate()
            if crossing:  # a pause or a revoked key drawn in this step must not outlast the quiet end
                world.quiet()
            world.scheduled_tick()
            if maintain_every_ms is not None and world.clock() >= next_maintenance:
                next_maintenance = world.clock() + maintain_every_ms
                report = maintain(world.engine, world.clock())
                result.maintenance_passes += 1
                result.maintenance.update({k: v for k, v in report.as_dict().items() if k != "cutoff_ms"})
            live = world.live()
            result.export_days += len(live) * (world.clock() - before) / DAY_MS
            result.table_export_days += sum(1 for e in live if e.table) * (world.clock() - before) / DAY_MS
            if world.clock() >= next_day:
                next_day += DAY_MS
                result.violations += oracles.check_day(world, verify=True)
                if result.violations and stop_at_first:
                    break
        if not result.violations or not stop_at_first:
            result.violations += oracles.check_end(world)
    finally:
        result.rows = len(world.source.rows)
        result.rows_checked = oracles.rows_checked
        result.runs, result.crashes = world.runs, world.crashes
        result.ops = Counter(op.what.split(" ", 1)[0] if op.what.startswith("create") else op.what for op in world.ops)
        result.faults = Counter(world.faults.injected)
        result.formats = Counter(e.formats[0][1] for e in world.exports.values())
        result.providers = Counter(e.places[0].provider for e in world.exports.values())
        result.verified_parts = Counter(oracles.verified_parts)
        result.late_timed, result.late_worst_ms = oracles.delays.timed, oracles.delays.worst_delay_ms
        result.late_untimed = Counter(oracles.delays.untimed)
        result.tabled = sum(1 for e in world.exports.values() if e.table)
        result.tables_read, result.table_rows_read = oracles.tables.tables_read, oracles.tables.rows_read
        result.duckdb_tables = oracles.tables.duckdb_tables
        result.table_only_files = oracles.tables.table_only_files
        result.table_replaced_files = oracles.tables.replaced_files
        result.table_known = Counter(oracles.tables.known)
        oracles.tables.dispose()
        if world.schedule is not None and world.storms is not None:
            result.schedule, result.outages = world.schedule.regime, world.schedule.outages
            result.skipped_ticks, result.storms = world.schedule.skipped, world.storms.count
            result.hostile_rows = oracles.values.hostile
        if world.bad is not None:
            result.bad_values, result.bad_fixed = len(world.bad.spoils), world.bad.fixed
            result.part_limit = world.part_limit
            result.bad_refused = Counter(oracles.bad.refused)
            result.bad_after_part = Counter(oracles.bad.after_part)
        result.violations = _unique(result.violations)
        firsts = {v.invariant: v for v in reversed(result.violations)}
        result.traces = [trace(world, v) for v in list(firsts.values())[:4]]
        result.history = history_digest(world)
        world.dispose()
        result.cpu_s = time.process_time() - began
    return result


#: The random token in the name (and body) of a connection test's or a probe's object
#: (`connection_test`, `attempt.Attempt.create`, `check_may_overwrite`).
_TEST_TOKEN = re.compile(r"(connection-test-(?:probe-|overwrite-probe-)?)[0-9a-f]{16}")


def history_lines(world: World) -> list[str]:
    """The world's history as the stores and the operator saw it: every send that reached a store
    (in order, with its answer and the body now there), every operation with its outcome, and the
    runs and crashes. What a seed does is drawn from the seed alone, so these are the same in every
    run of it, in any process (`test_sim_one_process`); the random token of a connection test's
    object is left out."""
    lines = [f"runs {world.runs}, crashes {world.crashes}, faults {sorted(world.faults.injected.items())}"]
    sends = sorted((w.seq, name, w) for name, b in world.buckets.by_name.items() for w in b.writes)
    for _, name, w in sends:
        key = _TEST_TOKEN.sub(r"\1*", w.key)
        body = world.buckets.by_name[name].objects.get(w.key) if key == w.key else None
        digest = hashlib.sha256(body).hexdigest()[:16] if body is not None else "-"
        lines.append(f"{w.at_ms} {name}/{key} {w.answer} {w.conditional} {w.plain_intended} {w.same_body} {digest}")
    lines += [_TEST_TOKEN.sub(r"\1*", op.line()) for op in world.ops]
    return lines


def history_digest(world: World) -> str:
    return hashlib.sha256("\n".join(history_lines(world)).encode()).hexdigest()


def _unique(violations: list[Violation]) -> list[Violation]:
    seen: set[str] = set()
    out = []
    for v in violations:
        if v.line() not in seen:
            seen.add(v.line())
            out.append(v)
    return out


def _command(seed: int, days: float, world_kw: dict[str, Any]) -> str:
    extra = "".join(
        f" --{k.replace('_', '-')} {v}"
        for k, v in world_kw.items()
        if isinstance(v, int | float | str) and not isinstance(v, bool)
    )
    if "wide" not in world_kw:  # the command line's default is the widened world, `World`'s the first
        extra += " --wide 0"
    if world_kw.get("azure") is False:
        extra += " --no-azure"
    if world_kw.get("frequencies"):
        extra += f" --frequencies {','.join(world_kw['frequencies'])}"
    if world_kw.get("formats"):
        extra += f" --formats {','.join(world_kw['formats'])}"
    if "more" in world_kw:
        extra += f" --more '{','.join(world_kw['more'])}'"
    if world_kw.get("only"):
        extra += f" --only '{','.join(world_kw['only'])}'"
    return f"PYTHONPATH=. python -m seqexport_dagster_tests.support.sim --seed {seed} --days {days:g}{extra}"
