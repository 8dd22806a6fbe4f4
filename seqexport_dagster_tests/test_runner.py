"""The window and snapshot runners, end to end on real databases and a real folder (DESIGN §3–§5).

Every test reads the files back (gunzip, JSON) and compares them with the source rows.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from seqexport_dagster.contract.keys import part_key
from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS
from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window, frequency_ms, parse_iso_ms
from seqexport_dagster.delivery.runner import DayReport, Runner
from seqexport_dagster.delivery.writer import EMPTY_GZIP
from seqexport_dagster.demo.generator import Scale, generate_account, insert_rows
from seqexport_dagster.destination.base import Destination, PutOutcome
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.local import LocalDestination
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.errors import AccessDenied, RetryableError, RunInterrupted, SecretKeyError
from seqexport_dagster_tests.support.layout import check_layout
from seqexport_dagster_tests.support.world import DAY0, World

DAY = dt.date(2026, 9, 30)
LAG = 120_000
SMALL = Scale(subscribers=120, email_sends_per_hour=30, sms_sends_per_hour=8, custom_per_hour=15)
Hook = Callable[[int, str], None]


class HookedDestination:
    """A local folder whose ``put`` calls ``before(n, key)`` and ``after(n, key)`` around the write."""

    def __init__(self, inner: Destination, log: list[str], before: Hook | None, after: Hook | None) -> None:
        self.inner, self.log, self.before, self.after = inner, log, before, after

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        n = len(self.log)
        if self.before:
            self.before(n, key)
        outcome = self.inner.put(key, body, create_only=create_only)
        self.log.append(key)
        if self.after:
            self.after(n, key)
        return outcome

    def describe(self) -> str:
        return self.inner.describe()

    def close(self) -> None:
        self.inner.close()


def hooked_runner(
    world: World, *, before: Hook | None = None, after: Hook | None = None, part_limit: int = 10
) -> tuple[Runner, list[str]]:
    log: list[str] = []

    def factory(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        assert config.provider == "local" and policy.allow_local
        return HookedDestination(LocalDestination(config.bucket), log, before, after)

    return world.runner(destination_factory=factory, part_limit=part_limit), log


def read_part(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in gzip.decompress(path.read_bytes()).splitlines()]


def window_files(root: Path, dataset: str, window: Window) -> list[Path]:
    folder = root / dataset / f"date={window.date_key}"
    return sorted(folder.glob(f"{dataset}-{window.from_ms}-{window.to_ms}-*.jsonl.gz"))


def source_rows(world: World, dataset: str, account: str = "acme") -> list[dict[str, Any]]:
    """The source's rows as the contract shows them, ordered as promised, computed independently."""
    ds = DATASETS[dataset]
    with world.source_engine.connect() as conn:
        result = conn.execute(sa.text(f"SELECT * FROM {dataset} WHERE account_id = :a"), {"a": account})
        rows = [dict(r._mapping) for r in result]
    out = []
    for r in rows:
        row = {}
        for f in ds.fields:
            value = r[f.name]
            row[f.name] = json.loads(value) if f.type in ("object", "array") and value is not None else value
        out.append(row)
    key = (lambda r: r["id"].encode()) if ds.is_snapshot else (lambda r: (r["recorded_at"], r["id"].encode()))
    return sorted(out, key=key)


def in_window(rows: list[dict[str, Any]], window: Window) -> list[dict[str, Any]]:
    return [r for r in rows if window.contains(parse_iso_ms(r["recorded_at"]))]


def export_whole_day(world: World, runner: Runner, export_id: str) -> dict[str, list[DayReport]]:
    """Tick through the day as the scheduler does: each grid step once it is due (a single late
    run would write one catch-up window for the whole day instead)."""
    step = frequency_ms(world.store.get_export(export_id).frequency)
    reports: dict[str, list[DayReport]] = {ds: [] for ds in DATASETS}
    for end in range(DAY0 + step, DAY0 + DAY_MS + 1, step):
        world.clock.now_ms = end + LAG
        for ds in DATASETS:
            reports[ds].append(runner.run_day(export_id, ds, DAY, run_id=f"run-{end}"))
    return reports


def windows_of(reports: list[DayReport]) -> list[Window]:
    return [w.window for r in reports for w in r.windows]


def assert_round_trip(world: World, root: Path, export_id: str, part_limit: int) -> int:
    """Every source row of every committed window appears exactly once, in order, in contract-named parts."""
    checked = 0
    for dataset in EVENT_DATASETS:
        expected_all = source_rows(world, dataset)
        windows = world.store.committed_windows(export_id, dataset, DAY.isoformat())
        assert windows and windows[0].from_ms == DAY0 and windows[-1].to_ms == DAY0 + DAY_MS
        for window in windows:
            files = window_files(root, dataset, window)
            names = [p.name for p in files]
            assert names == [part_key("", dataset, window, n).rsplit("/", 1)[1] for n in range(len(files))]
            got = [row for p in files for row in read_part(p)]
            expected = in_window(expected_all, window)
            assert got == expected, f"{dataset} {window}"
            assert [len(read_part(p)) for p in files] == (
                [part_limit] * (len(expected) // part_limit)
                + ([len(expected) % part_limit] if len(expected) % part_limit or not expected else [])
            )
            checked += len(got)
        all_files = {p.name for p in (root / dataset).rglob("*") if p.is_file()}
        assert all_files == {p.name for w in windows for p in window_files(root, dataset, w)}
        assert checked >= len([r for r in expected_all if DAY0 < parse_iso_ms(r["recorded_at"]) <= DAY0 + DAY_MS])
    return checked


@pytest.mark.parametrize("part_limit", [50_000, 37])
def test_round_trip_whole_day(world: World, part_limit: int) -> None:
    export = world.local_export(frequency="1h")
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SMALL)
    generate_account(world.source_engine, "globex", DAY0, DAY0 + DAY_MS, scale=SMALL, seed=9)
    reports = export_whole_day(world, world.runner(part_limit=part_limit), export.id)
    root = world.root / "bucket"
    assert all(r[-1].complete for r in reports.values())
    assert not any(r.complete for ds in EVENT_DATASETS for r in reports[ds][:-1]), "a day is open until its end"
    assert [len(windows_of(reports[ds])) for ds in EVENT_DATASETS] == [24, 24, 24]
    assert assert_round_trip(world, root, export.id, part_limit) > 1_000
    snapshot = sorted(root.glob("subscribers/date=2026-09-30/subscribers-*.jsonl.gz"))
    assert [row for p in snapshot for row in read_part(p)] == source_rows(world, "subscribers")
    assert (root / "subscribers/date=2026-09-30/_SUCCESS").read_bytes() == b""
    assert check_layout(root) == []
    # Nothing but dataset folders (and the local destination's own staging folder) at the root.
    assert {p.name for p in root.iterdir()} <= {*DATASETS, ".seqexport-tmp", "_sequenzy"}


def test_round_trip_on_postgresql(pg_world: World) -> None:
    export = pg_world.local_export(frequency="6h")
    generate_account(pg_world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SMALL)
    generate_account(pg_world.source_engine, "globex", DAY0, DAY0 + DAY_MS, scale=SMALL, seed=9)
    reports = export_whole_day(pg_world, pg_world.runner(part_limit=41), export.id)
    assert [len(windows_of(reports[ds])) for ds in EVENT_DATASETS] == [4, 4, 4]
    root = pg_world.root / "bucket"
    assert assert_round_trip(pg_world, root, export.id, 41) > 1_000
    snapshot = sorted(root.glob("subscribers/date=2026-09-30/subscribers-*.jsonl.gz"))
    assert [row for p in snapshot for row in read_part(p)] == source_rows(pg_world, "subscribers")
    assert check_layout(root) == []


def test_retry_writes_byte_identical_parts(world: World) -> None:
    export = world.local_export(datasets=("email_events",))
    generate_account(world.source_engine, "acme", DAY0, DAY0 + 2 * HOUR_MS, scale=SMALL)
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    window = Window(DAY0, DAY0 + HOUR_MS)

    def die_on_third(n: int, key: str) -> None:
        if n == 2:
            raise RetryableError("connection reset")

    failing, _ = hooked_runner(world, before=die_on_third)
    with pytest.raises(RetryableError):
        failing.run_day(export.id, "email_events", DAY)
    root = world.root / "bucket"
    partial = {p.name: p.read_bytes() for p in window_files(root, "email_events", window)}
    assert len(partial) == 2
    runner, _ = hooked_runner(world)
    report = runner.run_day(export.id, "email_events", DAY)
    assert [w.window for w in report.windows] == [window] and report.windows[0].advanced
    first = {p.name: p.read_bytes() for p in window_files(root, "email_events", window)}
    assert len(first) > 3
    assert {name: first[name] for name in partial} == partial, "the retry rewrote the same bytes"
    runner.write_window(export.id, "email_events", window)  # a backfill rewrite of a committed window
    assert {p.name: p.read_bytes() for p in window_files(root, "email_events", window)} == first


def test_one_window_of_120001_rows_gives_three_parts(world: World) -> None:
    export = world.local_export(datasets=("custom_events",))
    rows = (
        ("acme", f"cev_{i:07d}", "page_viewed", "2026-09-30T00:00:00.000Z",
         f"2026-09-30T00:{i * 59 // 120_001:02d}:{i % 60:02d}.{i % 999 + 1:03d}Z", f"sub_{i % 97}", None, '{"i":1}')
        for i in range(120_001)
    )  # fmt: skip
    insert_rows(world.source_engine, "custom_events", rows)
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    report = world.runner().run_day(export.id, "custom_events", DAY)
    (w,) = report.windows
    assert (w.rows, w.parts) == (120_001, 3)
    files = window_files(world.root / "bucket", "custom_events", w.window)
    assert [p.name[-13:] for p in files] == ["0000.jsonl.gz", "0001.jsonl.gz", "0002.jsonl.gz"]
    assert [len(gzip.decompress(p.read_bytes()).splitlines()) for p in files] == [50_000, 50_000, 20_001]
    assert check_layout(world.root / "bucket") == []


def custom(i: int) -> tuple[Any, ...]:
    ts = f"2026-09-30T00:10:{i // 1000:02d}.{i % 1000:03d}Z"
    return ("acme", f"cev_{i:04d}", "trial_started", ts, ts, "sub_1", None, "{}")


class CreateLog:
    """Wraps the local folder: every create-only write and what the store answered."""

    def __init__(self) -> None:
        self.outcomes: list[tuple[str, PutOutcome]] = []


def copy_row(world: World, table: str, source_id: str, new_id: str) -> None:
    """Insert a copy of a source row under a new id (a row that appears late in the same place)."""
    with world.source_engine.connect() as conn:
        row = list(conn.execute(sa.text(f"SELECT * FROM {table} WHERE id = :i"), {"i": source_id}).one())
    row[1] = new_id
    insert_rows(world.source_engine, table, [tuple(row)])


def bucket_ids(files: list[Path]) -> list[str]:
    return [row["id"] for p in files for row in read_part(p)]


@pytest.mark.parametrize("lost_response", [False, True], ids=["failed-put", "put-landed-response-lost"])
def test_retry_resumes_after_the_last_landed_part_and_never_rewrites_one(world: World, lost_response: bool) -> None:
    """Attempt 1 lands parts 0000-0001 (and 0002 when only its answer is lost), then fails. Rows in
    landed parts are deleted and one row appears late inside them. The retry leaves landed parts
    as they are, sends the part of unknown outcome again with its recorded rows, continues after the
    last boundary, and appends the late row as one more part: every source row exactly once.
    """
    export = world.local_export(datasets=("custom_events",))
    insert_rows(world.source_engine, "custom_events", [custom(i) for i in range(35)])
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    window = Window(DAY0, DAY0 + HOUR_MS)

    def before(n: int, key: str) -> None:
        if n == 2 and not lost_response:
            raise RetryableError("connection reset")

    def after(n: int, key: str) -> None:
        if n == 2 and lost_response:
            raise RetryableError("connection reset after upload")

    failing, log = hooked_runner(world, before=before, after=after)
    with pytest.raises(RetryableError):
        failing.run_day(export.id, "custom_events", DAY)
    root = world.root / "bucket"
    first = {p.name: p.read_bytes() for p in window_files(root, "custom_events", window)}
    assert len(first) == (3 if lost_response else 2)
    parts = world.store.window_parts(export.id, "custom_events", window, world.store.get_export(export.id).location)
    assert [(p.number, p.landed) for p in parts] == [(0, True), (1, True), (2, False)], "intent before every PUT"
    assert parts[1].last == ("2026-09-30T00:10:00.019Z", "cev_0019")
    with world.source_engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM custom_events WHERE id < 'cev_0012'"))
    copy_row(world, "custom_events", "cev_0015", "cev_0015b")  # late, inside part 0001's range

    retry, retry_log = hooked_runner(world)
    report = retry.run_day(export.id, "custom_events", DAY)
    (w,) = report.windows
    assert w.advanced and w.sent.skipped == 2 and w.sent.resent == 1 and w.sent.late_rows == 1
    assert w.sent.existed == (1 if lost_response else 0)
    files = window_files(root, "custom_events", window)
    assert [f.name[-14:] for f in files] == [f"-{n:04d}.jsonl.gz" for n in range(5)]
    for name, body in first.items():
        assert (root / "custom_events/date=2026-09-30" / name).read_bytes() == body, f"{name} was rewritten"
    ids = bucket_ids(files)
    assert len(ids) == len(set(ids)), "no row twice"
    current = {row["id"] for row in source_rows(world, "custom_events")}
    assert current <= set(ids), "every source row is in the bucket"
    assert read_part(files[-1])[0]["id"] == "cev_0015b"
    assert (w.rows, w.parts) == (len(ids), 5)
    assert check_layout(root) == []


def test_pause_stops_before_the_next_file(world: World) -> None:
    export = world.local_export(datasets=("custom_events",))
    insert_rows(world.source_engine, "custom_events", [custom(i) for i in range(55)])
    world.clock.now_ms = DAY0 + HOUR_MS + LAG

    def pause_after_part_0001(n: int, key: str) -> None:
        if n == 1:
            world.store.set_status(export.id, "paused", world.clock())

    runner, log = hooked_runner(world, after=pause_after_part_0001)
    with pytest.raises(RunInterrupted) as err:
        runner.run_day(export.id, "custom_events", DAY)
    assert err.value.status == "paused"
    assert len(log) == 2, "nothing written after the pause"
    state = world.store.get_export(export.id).dataset_state("custom_events")
    assert state is not None
    assert state.position_ms == DAY0, "the interrupted window stays uncommitted"
    assert state.failures == 0 and state.last_error is None, "a pause is not a failure"
    assert [w.status for w in world.store.ledger(export.id)] == ["canceled"]
    # A paused export does not start either.
    with pytest.raises(RunInterrupted):
        runner.run_day(export.id, "custom_events", DAY)
    assert len(log) == 2
    # Resume: the window is written whole, continuing from the kept position.
    world.store.set_status(export.id, "active", world.clock())
    report = world.runner(part_limit=10).run_day(export.id, "custom_events", DAY)
    assert [(w.window, w.rows, w.parts) for w in report.windows] == [(Window(DAY0, DAY0 + HOUR_MS), 55, 6)]
    assert check_layout(world.root / "bucket") == []


def test_destination_change_mid_window_restarts_at_the_new_destination(world: World) -> None:
    export = world.local_export(datasets=("custom_events",))
    insert_rows(world.source_engine, "custom_events", [custom(i) for i in range(35)])
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    new_root = world.root / "moved"

    def move_after_second_put(n: int, key: str) -> None:
        if n == 1:
            world.store.update_destination(export.id, DestinationConfig("local", str(new_root)), world.clock())

    runner, log = hooked_runner(world, after=move_after_second_put)
    report = runner.run_day(export.id, "custom_events", DAY)
    (w,) = report.windows
    assert (w.rows, w.parts, w.restarts, w.advanced) == (35, 4, 1, True)
    assert len(log) == 2 + 4 + 1  # two parts at the old place, four at the new one, then the manifest
    window = Window(DAY0, DAY0 + HOUR_MS)
    ids = [row["id"] for p in window_files(new_root, "custom_events", window) for row in read_part(p)]
    assert ids == [f"cev_{i:04d}" for i in range(35)]
    assert check_layout(new_root) == []
    # The old place keeps what it got (we never delete), and the ledger shows the restart.
    assert len(window_files(world.root / "bucket", "custom_events", window)) == 2
    assert [w.status for w in world.store.ledger(export.id)] == ["canceled", "committed"]


def test_snapshot_parts_then_success_last(world: World) -> None:
    export = world.local_export(datasets=("subscribers",))
    generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(subscribers=95))
    runner, log = hooked_runner(world, part_limit=20)
    world.clock.now_ms = DAY0 + DAY_MS + LAG - 1
    assert runner.run_day(export.id, "subscribers", DAY).snapshot is None, "not before the day ends plus the lag"
    assert log == []
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    report = runner.run_day(export.id, "subscribers", DAY)
    assert report.complete and report.snapshot is not None
    assert (report.snapshot.rows, report.snapshot.parts) == (95, 5)
    folder = "subscribers/date=2026-09-30/"
    assert log == [f"{folder}subscribers-{n:04d}.jsonl.gz" for n in range(5)] + [f"{folder}_SUCCESS"]
    root = world.root / "bucket"
    assert (root / folder / "_SUCCESS").stat().st_size == 0
    rows = [row for p in sorted(root.glob(f"{folder}subscribers-*")) for row in read_part(p)]
    assert rows == source_rows(world, "subscribers")
    assert check_layout(root) == []


def test_snapshot_interrupted_has_no_success_and_resumes_without_rewriting(world: World) -> None:
    export = world.local_export(datasets=("subscribers",))
    generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(subscribers=95))
    world.clock.now_ms = DAY0 + DAY_MS + LAG

    def die(n: int, key: str) -> None:
        if n == 2:
            raise RetryableError("connection reset")

    failing, log = hooked_runner(world, before=die, part_limit=20)
    with pytest.raises(RetryableError):
        failing.run_day(export.id, "subscribers", DAY)
    root = world.root / "bucket"
    folder = root / "subscribers/date=2026-09-30"
    assert not (folder / "_SUCCESS").exists(), "no marker for an incomplete snapshot"
    landed = {p.name: p.read_bytes() for p in folder.glob("subscribers-*")}
    assert sorted(landed) == ["subscribers-0000.jsonl.gz", "subscribers-0001.jsonl.gz"]
    with world.source_engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM subscribers WHERE id >= 'sub_acme_0000040' AND id < 'sub_acme_0000050'"))
    copy_row(world, "subscribers", "sub_acme_0000011", "sub_acme_0000011b")  # new, inside landed part 0000
    runner, log = hooked_runner(world, part_limit=20)
    report = runner.run_day(export.id, "subscribers", DAY)
    snap = report.snapshot
    assert snap is not None and snap.sent.skipped == 2 and snap.sent.late_rows == 1
    assert log[-1].endswith("_SUCCESS"), "_SUCCESS strictly after every part"
    for name, body in landed.items():
        assert (folder / name).read_bytes() == body, f"{name} was rewritten"
    files = sorted(folder.glob("subscribers-*"))
    assert [f.name for f in files] == [f"subscribers-{n:04d}.jsonl.gz" for n in range(6)]
    ids = bucket_ids(files)
    assert len(ids) == len(set(ids)), "exactly once"
    assert {row["id"] for row in source_rows(world, "subscribers")} <= set(ids)
    assert check_layout(root) == []


def test_backfill_delivers_only_what_is_missing_and_replace_is_explicit(world: World) -> None:
    export = world.local_export(datasets=("custom_events",))
    insert_rows(world.source_engine, "custom_events", [custom(i) for i in range(25)])
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    runner, log = hooked_runner(world)
    export_whole_day(world, runner, export.id)
    root = world.root / "bucket"
    window = Window(DAY0, DAY0 + HOUR_MS)
    before = {p.name: p.read_bytes() for p in window_files(root, "custom_events", window)}
    puts = len(log)
    # A backfill of a whole day writes nothing: every window is whole in the bucket.
    report = runner.run_day(export.id, "custom_events", DAY, rewrite=True)
    assert report.windows == [] and report.skipped_windows == 24 and len(log) == puts
    # A late row: the backfill appends exactly it, as part 0003.
    copy_row(world, "custom_events", "cev_0003", "cev_0003b")
    report = runner.run_day(export.id, "custom_events", DAY, rewrite=True)
    (w,) = report.windows
    assert (w.window, w.sent.parts, w.sent.late_rows, w.parts) == (window, 1, 1, 4)
    assert all((root / "custom_events/date=2026-09-30" / n).read_bytes() == b for n, b in before.items())
    # Replace (an operator's explicit choice) rewrites from 0000 and blanks numbers it no longer needs.
    with world.source_engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM custom_events WHERE id >= 'cev_0010'"))
    report = runner.run_day(export.id, "custom_events", DAY, rewrite=True, replace=True)
    files = window_files(root, "custom_events", window)
    assert [len(read_part(f)) for f in files] == [10, 1, 0, 0]
    assert files[-1].read_bytes() == EMPTY_GZIP
    assert sorted(bucket_ids(files)) == sorted(r["id"] for r in source_rows(world, "custom_events"))


def test_delayed_bounce_lands_in_the_window_of_its_recorded_time(world: World) -> None:
    export = world.local_export(datasets=("email_events",), frequency="15m")
    generate_account(world.source_engine, "acme", DAY0, DAY0 + DAY_MS, scale=SMALL)
    export_whole_day(world, world.runner(), export.id)
    delayed = [
        r
        for r in source_rows(world, "email_events")
        if r["event_type"] == "bounced"
        and parse_iso_ms(r["recorded_at"]) - parse_iso_ms(r["occurred_at"]) >= 2 * HOUR_MS
        and parse_iso_ms(r["recorded_at"]) <= DAY0 + DAY_MS
    ]
    assert delayed, "the demo data has delayed bounces"
    root = world.root / "bucket"
    where = {
        row["id"]: Window(int(p.name.split("-")[1]), int(p.name.split("-")[2]))
        for p in root.rglob("*.jsonl.gz")
        for row in read_part(p)
    }
    for bounce in delayed:
        window = where[bounce["id"]]
        assert window.contains(parse_iso_ms(bounce["recorded_at"]))
        assert not window.contains(parse_iso_ms(bounce["occurred_at"]))
    assert check_layout(root) == []


def test_snapshot_in_progress_starts_over_at_a_new_destination(world: World) -> None:
    export = world.local_export(datasets=("subscribers",))
    generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(subscribers=95))
    world.clock.now_ms = DAY0 + DAY_MS + LAG
    new_root = world.root / "moved"

    def move_after_part_0002(n: int, key: str) -> None:
        if n == 2:
            world.store.update_destination(export.id, DestinationConfig("local", str(new_root)), world.clock())

    runner, log = hooked_runner(world, after=move_after_part_0002, part_limit=20)
    report = runner.run_day(export.id, "subscribers", DAY)
    assert report.snapshot is not None and report.snapshot.restarts == 1
    folder = "subscribers/date=2026-09-30/"
    assert log[3:] == [f"{folder}subscribers-{n:04d}.jsonl.gz" for n in range(5)] + [f"{folder}_SUCCESS"]
    assert not (world.root / "bucket" / folder / "_SUCCESS").exists(), "the old place never gets the marker"
    rows = [row for p in sorted((new_root / folder).glob("subscribers-*")) for row in read_part(p)]
    assert rows == source_rows(world, "subscribers")
    assert check_layout(new_root) == []


def test_layout_check_catches_broken_layouts(world: World) -> None:
    """The checker used on the demo's output fails on each kind of damage."""
    import os
    import shutil

    export = world.local_export(datasets=("custom_events", "subscribers"))
    insert_rows(world.source_engine, "custom_events", [custom(i) for i in range(25)])
    generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(subscribers=30))
    export_whole_day(world, world.runner(part_limit=10), export.id)
    good = world.root / "bucket"
    assert check_layout(good) == []

    def damaged(name: str, damage: Callable[[Path], None]) -> list[str]:
        copy = world.root / name
        shutil.copytree(good, copy)
        damage(copy)
        return check_layout(copy)

    first = Window(DAY0, DAY0 + HOUR_MS)
    events = lambda root: window_files(root, "custom_events", first)  # noqa: E731
    snap = "subscribers/date=2026-09-30/"

    def reverse_first_part(root: Path) -> None:
        zero = events(root)[0]
        lines = gzip.decompress(zero.read_bytes()).splitlines(keepends=True)
        zero.write_bytes(gzip.compress(b"".join(reversed(lines))))

    assert any(
        "[gap]" in p
        for p in damaged(
            "gap",
            lambda r: [
                p.unlink() for p in window_files(r, "custom_events", Window(DAY0 + HOUR_MS, DAY0 + 2 * HOUR_MS))
            ],
        )
    )
    assert any(
        "[duplicate_id]" in p
        for p in damaged(
            "dup",
            lambda r: shutil.copy(events(r)[0], events(r)[2].with_name(events(r)[2].name[:-13] + "0003.jsonl.gz")),
        )
    )
    assert any("[missing_part]" in p for p in damaged("hole", lambda r: events(r)[1].unlink()))
    assert any("[corrupt_gzip]" in p for p in damaged("gzip", lambda r: events(r)[0].write_bytes(b"not gzip")))
    assert any(
        "[out_of_order]" in p
        for p in damaged(
            "order",
            reverse_first_part,
        )
    )
    assert any(
        "[unexpected_object]" in p
        for p in damaged("stray", lambda r: (r / "custom_events/date=2026-09-30/notes.txt").write_text("x"))
    )
    assert any(
        "[success_not_empty]" in p for p in damaged("success", lambda r: (r / snap / "_SUCCESS").write_bytes(b"ok"))
    )
    assert any("[missing_success]" in p for p in damaged("nosuccess", lambda r: (r / snap / "_SUCCESS").unlink()))
    assert any(
        "[success_not_last]" in p
        for p in damaged(
            "late",
            lambda r: os.utime(
                r / snap / "subscribers-0000.jsonl.gz", ns=((r / snap / "_SUCCESS").stat().st_mtime_ns + 10**9,) * 2
            ),
        )
    )
    assert any(
        "[schema_mismatch]" in p
        for p in damaged("fields", lambda r: events(r)[0].write_bytes(gzip.compress(b'{"id":"x"}\n')))
    )
    assert any(
        "[row_outside_window]" in p
        for p in damaged(
            "misplaced",
            lambda r: shutil.copy(
                events(r)[0], window_files(r, "custom_events", Window(first.to_ms, first.to_ms + HOUR_MS))[0]
            ),
        )
    )


def test_failed_window_releases_the_source_connection_on_postgresql(pg_world: World) -> None:
    """A failed PUT must not leave the PostgreSQL source idle in a transaction with an open cursor
    for as long as the failure (and its traceback) is kept, e.g. by Dagster for the run's events."""
    export = pg_world.local_export(datasets=("custom_events",))
    insert_rows(pg_world.source_engine, "custom_events", [custom(i) for i in range(35)])
    pg_world.clock.now_ms = DAY0 + HOUR_MS + LAG

    def die(n: int, key: str) -> None:
        if n == 1:
            raise RetryableError("connection reset")

    runner, _ = hooked_runner(pg_world, before=die)
    runner.source.batch_size = 10
    with pytest.raises(RetryableError) as kept:
        runner.run_day(export.id, "custom_events", DAY)
    assert kept.value.__traceback__ is not None
    with pg_world.source_engine.connect() as conn:
        open_transactions = conn.execute(
            sa.text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
            )
        ).scalar_one()
    assert open_transactions == 0


class CreateOnlyKeyWithoutPreconditions:
    """A store like B2 behind a key that may create but never overwrite: no precondition to send,
    so a re-sent object that exists answers 403. ``lose_answer`` drops the answer to that many
    writes after they land (the PUT reached the store; the worker never heard back)."""

    preconditions = False

    def __init__(self, root: Path, *, revoked: bool = False) -> None:
        self.inner = LocalDestination(root)
        self.lose_answer = 0
        self.revoked = revoked
        self.sent: list[str] = []

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        self.sent.append(key)
        if self.revoked or self.inner.put(key, body) == PutOutcome.EXISTED:
            raise AccessDenied(f"access denied for s3:PutObject on bucket/{key}")
        if self.lose_answer:
            self.lose_answer -= 1
            raise RetryableError("connection reset after upload")
        return PutOutcome.CREATED

    def describe(self) -> str:
        return "b2://bucket"

    def close(self) -> None:
        return None


def test_a_403_on_a_resent_part_is_not_a_revoked_key_when_a_fresh_probe_succeeds(world: World) -> None:
    export = world.local_export(datasets=("custom_events",))
    insert_rows(world.source_engine, "custom_events", [custom(i) for i in range(25)])
    world.clock.now_ms = DAY0 + HOUR_MS + LAG
    store = CreateOnlyKeyWithoutPreconditions(world.root / "bucket")
    runner = world.runner(part_limit=10, destination_factory=lambda config, policy: store)
    store.lose_answer = 1  # part 0000 lands, its answer is lost
    with pytest.raises(RetryableError):
        runner.run_day(export.id, "custom_events", DAY)
    report = runner.run_day(export.id, "custom_events", DAY)
    (w,) = report.windows
    assert w.advanced and (w.sent.resent, w.sent.existed, w.parts) == (1, 1, 3)
    probe = [k for k in store.sent if "/_sequenzy/" in f"/{k}" and "/manifests/" not in f"/{k}"]
    assert len(probe) == 1 and probe[0].startswith("_sequenzy/connection-test-probe-")
    assert store.sent.count(part_key("", "custom_events", Window(DAY0, DAY0 + HOUR_MS), 0)) == 2
    ids = bucket_ids(window_files(world.root / "bucket", "custom_events", Window(DAY0, DAY0 + HOUR_MS)))
    assert sorted(ids) == [f"cev_{i:04d}" for i in range(25)]
    state = world.store.get_export(export.id).dataset_state("custom_events")
    assert state is not None and state.failures == 0 and state.last_error is None

    # Where the probe is refused too, the key is revoked: the 403 stands, for the customer to see.
    insert_rows(world.source_engine, "custom_events", [custom(30 + i) for i in range(3)])
    world.clock.now_ms = DAY0 + 2 * HOUR_MS + LAG
    store.lose_answer = 1
    with pytest.raises(RetryableError):
        runner.run_day(export.id, "custom_events", dt.date(2026, 9, 30))
    store.revoked = True
    with pytest.raises(AccessDenied, match="access denied for s3:PutObject on bucket/custom_events"):
        runner.run_day(export.id, "custom_events", DAY)
    state = world.store.get_export(export.id).dataset_state("custom_events")
    assert state is not None and state.failures == 2 and "access denied" in (state.last_error or "")


def test_a_destination_that_cannot_be_opened_is_a_failure_the_customer_sees(world: World) -> None:
    """A secret that no longer opens (or a stored endpoint that no longer validates) fails the
    attempt in the ledger and counts for the backoff, instead of failing before anything is kept."""
    export = world.local_export(datasets=("custom_events",))
    insert_rows(world.source_engine, "custom_events", [custom(i) for i in range(5)])
    world.clock.now_ms = DAY0 + HOUR_MS + LAG

    def unopenable(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
        raise SecretKeyError("the stored secret does not open with the current SEQEXPORT_SECRET_KEYS")

    with pytest.raises(SecretKeyError):
        world.runner(destination_factory=unopenable).run_day(export.id, "custom_events", DAY)
    state = world.store.get_export(export.id).dataset_state("custom_events")
    assert state is not None and state.failures == 1 and state.next_retry_at is not None
    assert "does not open" in (state.last_error or "")
    (attempt,) = world.store.ledger(export.id)
    assert attempt.status == "failed" and "does not open" in (attempt.error or "")
    history = world.store.history(export.id, world.clock())
    assert history and history[0].status == "failed"


def test_a_snapshot_whose_success_landed_unanswered_gets_no_part_after_it(world: World) -> None:
    export = world.local_export(datasets=("subscribers",))
    generate_account(world.source_engine, "acme", DAY0, DAY0 + HOUR_MS, scale=Scale(subscribers=30))
    world.clock.now_ms = DAY0 + DAY_MS + LAG

    def lost(n: int, key: str) -> None:
        if key.endswith("_SUCCESS"):
            raise RetryableError("connection reset after upload")

    failing, _ = hooked_runner(world, after=lost, part_limit=20)
    with pytest.raises(RetryableError):
        failing.run_day(export.id, "subscribers", DAY)
    copy_row(world, "subscribers", "sub_acme_0000001", "sub_acme_0000001b")  # arrives after _SUCCESS
    runner, log = hooked_runner(world, part_limit=20)
    report = runner.run_day(export.id, "subscribers", DAY)
    assert report.snapshot is not None and report.snapshot.sent.parts == 0 and report.snapshot.parts == 2
    assert [k.rsplit("/", 1)[-1] for k in log] == ["_SUCCESS"], "only the marker again, nothing after it"
    assert check_layout(world.root / "bucket") == []
