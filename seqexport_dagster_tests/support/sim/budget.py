"""Seeds run for a budget (``make sim``, ``make sim-long``): consecutive seeds from a first one,
in ``jobs`` worker processes, until the time budget or the export-day budget is spent; a line per
seed, a progress line now and then, and the totals (`totals`).

Each worker process runs seed after seed, so imports and the template databases
(`templates.template`) are paid once per process, not per seed. A seed's history does not depend
on the process that runs it, nor on the order seeds finish in: what a worker runs is exactly what
``--seed N`` runs (its reproducing command). The export-day budget counts finished seeds; seeds
still running when it is reached finish and count too (so a run ends a little past the budget).
"""

from __future__ import annotations

import multiprocessing
import resource
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from multiprocessing.pool import AsyncResult
from typing import Any

from seqexport_dagster_tests.support.sim.oracles import Violation
from seqexport_dagster_tests.support.sim.run import SimResult, simulate
from seqexport_dagster_tests.support.sim.run import _command as command

#: A progress line after this many seconds of wall time since the last one.
PROGRESS_EVERY_S = 60.0


def _one(seed: int, days: float, world_kw: dict[str, Any]) -> SimResult:
    """One seed; an exception out of the simulation is that seed's finding, not the run's end."""
    began = time.process_time()
    try:
        return simulate(seed, days=days, **world_kw)
    except Exception as exc:  # reported with its traceback; the next seeds go on
        result = SimResult(seed, days, command=command(seed, days, world_kw))
        result.violations = [Violation("exception", "-", f"{type(exc).__name__}: {exc}")]
        result.traces = ["  " + line for line in traceback.format_exc().rstrip().splitlines()[-24:]]
        result.cpu_s = time.process_time() - began
        return result


def run_seeds(
    first_seed: int,
    *,
    days: float,
    world_kw: dict[str, Any],
    jobs: int = 1,
    seconds: float | None = None,
    export_days: float | None = None,
    say: Callable[[str], None] = print,
) -> tuple[list[SimResult], float, float]:
    """Seeds ``first_seed``, ``first_seed + 1``... until a budget is spent; (results in seed order,
    wall seconds, CPU seconds of this process and its workers, imports included). No budget at all would never end: one of ``seconds`` and ``export_days`` is due."""
    if seconds is None and export_days is None:
        raise ValueError("run_seeds needs seconds or export_days (or both)")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    began, cpu_began = time.monotonic(), _cpu_all()
    seeds = _count(first_seed)
    results: list[SimResult] = []
    last_progress = began

    def spent() -> bool:
        if seconds is not None and time.monotonic() - began >= seconds:
            return True
        return export_days is not None and sum(r.export_days for r in results) >= export_days

    def done(result: SimResult) -> None:
        nonlocal last_progress
        results.append(result)
        say(result.summary())
        if time.monotonic() - last_progress >= PROGRESS_EVERY_S:
            last_progress = time.monotonic()
            say(progress(results, time.monotonic() - began, export_days))

    try:
        if jobs == 1:  # in this process: what `--seed` runs, and a profiler sees every frame
            while not spent():
                done(_one(next(seeds), days, world_kw))
        else:
            _in_pool(jobs, seeds, days, world_kw, spent, done)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (`__main__`): the totals of the seeds that finished
        say(f"interrupted: the totals below count the {len(results)} seeds that finished")
    return sorted(results, key=lambda r: r.seed), time.monotonic() - began, _cpu_all() - cpu_began


def _cpu_all() -> float:
    """CPU seconds of this process and of its children that ended (the pool's workers, joined)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _in_pool(
    jobs: int,
    seeds: Iterator[int],
    days: float,
    world_kw: dict[str, Any],
    spent: Callable[[], bool],
    done: Callable[[SimResult], None],
) -> None:
    # spawn: the workers start clean (no inherited threads or engines), then import once each.
    pool = multiprocessing.get_context("spawn").Pool(jobs)
    try:
        running: list[AsyncResult[SimResult]] = []
        while True:
            while len(running) < jobs and not spent():
                running.append(pool.apply_async(_one, (next(seeds), days, world_kw)))
            if not running:
                break
            for r in [r for r in running if r.ready()]:
                running.remove(r)
                done(r.get())
            time.sleep(0.2)
        pool.close()
    finally:
        pool.terminate()  # interrupted (Ctrl-C, SIGTERM): the seeds still running are dropped
        pool.join()


def _count(first: int) -> Iterator[int]:
    n = first
    while True:
        yield n
        n += 1


def progress(results: list[SimResult], wall_s: float, export_days: float | None) -> str:
    days = sum(r.export_days for r in results)
    cpu = sum(r.cpu_s for r in results) or 1e-9
    of = f" of {export_days:.0f}" if export_days is not None else ""
    failing = sum(1 for r in results if not r.ok)
    return (
        f"progress: {len(results)} seeds, {days:.0f}{of} export-days, {days / cpu:.2f} per CPU-s, "
        f"{days / max(wall_s, 1e-9) * 3600:.0f} per wall-hour, {failing} failing, {wall_s / 60:.1f} min"
    )


def found_counts(results: list[SimResult]) -> dict[str, int]:
    """Rows lost and duplicated (distinct rows), objects replaced and create-only writes reaching an
    existing key, over every seed: explicit zeros for the long run's report. A failing seed stops
    at the first day with a violation, so its counts are a lower bound."""
    lost, twice, replaced, create_only, slow = set(), set(), set(), set(), set()
    for r in results:
        for v in r.violations:
            if v.invariant == "row lost":
                lost.add((r.seed, v.export, v.row))
            elif v.invariant == "row loaded twice":
                twice.add((r.seed, v.export, v.row))
            elif v.invariant == "object" and ("replaced" in v.detail or "different body" in v.detail):
                replaced.add((r.seed, v.detail))
            elif v.invariant == "object" and "without precondition" in v.detail:
                create_only.add((r.seed, v.detail))
            elif v.invariant == "late beyond bound":
                slow.add((r.seed, v.export, v.row))
    return {
        "rows lost": len(lost),
        "rows duplicated": len(twice),
        "objects replaced": len(replaced),
        "unconditional PUTs on existing create-only keys": len(create_only),
        "late rows beyond the bound": len(slow),
    }


def totals(results: list[SimResult], wall_s: float | None = None, cpu_all_s: float | None = None) -> str:
    days = sum(r.export_days for r in results)
    cpu = sum(r.cpu_s for r in results) or 1e-9
    found = Counter(v.invariant for r in results for v in r.violations)
    failing = [r for r in results if not r.ok]
    ops = sum((r.ops for r in results), Counter())
    faults = sum((r.faults for r in results), Counter())
    formats = sum((r.formats for r in results), Counter())
    verified = sum((r.verified_parts for r in results), Counter())
    seeds = f" (seeds {results[0].seed}..{results[-1].seed})" if results else ""
    wall = f", {wall_s:.0f} s of wall time" if wall_s is not None else ""
    if cpu_all_s is not None:  # the seeds' own CPU-s above; this adds imports, templates, the pool
        wall += f" ({cpu_all_s:.0f} CPU-s in all processes: {days / max(cpu_all_s, 1e-9):.2f} per CPU-s)"
    lines = [
        f"{len(results)} seeds{seeds}, {days:.0f} export-days in {cpu:.0f} CPU-s{wall}: "
        f"{days / cpu:.2f} export-days per CPU-second",
        f"rows written {sum(r.rows for r in results)}, rows checked {sum(r.rows_checked for r in results)}, "
        f"runs {sum(r.runs for r in results)}, worker crashes {sum(r.crashes for r in results)}",
        ", ".join(f"{k} {n}" for k, n in found_counts(results).items()),
        f"operations: {dict(ops)}",
        f"faults: {dict(faults)}",
        f"exports by format: {dict(formats)}; parts verify read, by format: {dict(verified)}",
        f"late rows timed against the bound: {sum(r.late_timed for r in results)} (largest delay after "
        f"visibility {max((r.late_worst_ms for r in results), default=0) / 60_000:.0f} min); not timed: "
        f"{dict(sum((r.late_untimed for r in results), Counter()))}",
        f"Delta tables (issue 44): {sum(r.tabled for r in results)} exports with a table, "
        f"{sum(r.tables_read for r in results)} delta-rs reads ({sum(r.table_rows_read for r in results)} rows), "
        f"{sum(r.duckdb_tables for r in results)} DuckDB reads, "
        f"{sum(r.table_only_files for r in results)} table-only files of stranded parts "
        f"({sum(r.table_replaced_files for r in results)} of replaces left unfinished by a move), "
        f"{sum(r.export_days for r in results if r.tabled):.0f} export-days in seeds with a table, "
        f"{sum(r.table_export_days for r in results):.0f} export-days of exports with a table; documented "
        f"limits met: {dict(sum((r.table_known for r in results), Counter())) or 'none'}",
        f"found: {dict(found) or 'nothing'}" + (f" (seeds {[r.seed for r in failing]})" if failing else ""),
    ]
    wide = [r for r in results if r.schedule]
    if wide:  # the widened world (issue 39): what of it these seeds drew
        by_regime: Counter[str] = Counter()
        for r in wide:
            by_regime[r.schedule] += round(r.export_days)
        lines.insert(
            -1,
            f"widened world: export-days by schedule {dict(by_regime)}; "
            f"{sum(r.export_days for r in wide if r.outages):.0f} export-days in seeds with daemon outages "
            f"({sum(r.outages for r in wide)} outages), {sum(r.export_days for r in wide if r.storms):.0f} in seeds "
            f"with fault storms ({sum(r.storms for r in wide)} storms), {sum(r.skipped_ticks for r in wide)} ticks "
            f"not made, {sum(r.hostile_rows for r in wide)} hostile values read back equal to their source",
        )
    bad = [r for r in results if r.part_limit]
    if bad:  # wide=2: bad source values (`bad_values`)
        refused = sum((r.bad_refused for r in bad), Counter())
        after = sum((r.bad_after_part for r in bad), Counter())
        lines.insert(
            -1,
            f"bad values (wide=2): {sum(r.bad_values for r in bad)} written, {sum(r.bad_fixed for r in bad)} fixed; "
            f"windows refused with UntypeableValue by format {dict(refused)}, of them after landed parts "
            f"{dict(after)}; {sum(r.export_days for r in bad if r.part_limit < 50_000):.0f} export-days with "
            "small parts",
        )
    lines += [f"failing seed {r.seed}: {r.command}" for r in failing]
    return "\n".join(lines)
