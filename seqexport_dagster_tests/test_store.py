"""The control plane on SQLite and the real PostgreSQL server (DESIGN §6)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from seqexport_dagster.contract.window import HOUR_MS, MINUTE_MS, Window
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.errors import NotFound, SecretKeyError
from seqexport_dagster.store import ControlPlane
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.tables import metadata
from seqexport_dagster_tests.support.world import DAY0, World

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture(params=["sqlite", "postgresql"])
def any_world(request: pytest.FixtureRequest) -> World:
    return request.getfixturevalue("world" if request.param == "sqlite" else "pg_world")


def s3(bucket: str = "acme-exports", secret: str = SECRET, prefix: str = "sequenzy") -> DestinationConfig:
    return DestinationConfig(
        "s3", bucket, prefix=prefix, region="us-east-1", access_key_id="AKIAEXAMPLE", secret_access_key=secret
    )


def create(world: World, account: str = "acme", **kwargs: object) -> str:
    kwargs.setdefault("datasets", ("email_events", "subscribers"))
    record = world.store.create_export(
        account_id=account,
        destination=kwargs.pop("destination", s3()),  # type: ignore[arg-type]
        frequency=kwargs.pop("frequency", "15m"),  # type: ignore[arg-type]
        lag_ms=120_000,
        now_ms=world.clock(),
        **kwargs,  # type: ignore[arg-type]
    )
    return record.id


def test_migrations_create_exactly_the_metadata_tables(any_world: World) -> None:
    engine = any_world.control_engine
    tables = set(sa.inspect(engine).get_table_names())
    assert tables == set(metadata.tables) | {"alembic_version"}
    with engine.connect() as conn:
        drift = compare_metadata(MigrationContext.configure(conn), metadata)
    assert drift == [], f"store/tables.py and the migrations disagree: {drift}"
    # Running migrations again is a no-op.
    any_world.store.migrate()
    assert set(sa.inspect(engine).get_table_names()) == tables


def test_create_get_list(any_world: World) -> None:
    store = any_world.store
    a = create(any_world, "acme")
    any_world.clock.advance(1)  # listed in creation order
    b = create(any_world, "globex", datasets=("sms_events",), frequency="1h")
    any_world.clock.now_ms = DAY0
    got = store.get_export(a)
    assert (got.account_id, got.provider, got.bucket, got.prefix, got.frequency, got.status) == (
        "acme",
        "s3",
        "acme-exports",
        "sequenzy",
        "15m",
        "active",
    )
    assert [d.dataset for d in got.datasets] == ["email_events", "subscribers"]
    events, snapshot = got.datasets
    assert events.added_at == DAY0 and events.position_ms == DAY0
    assert snapshot.position_ms == DAY0, "the snapshot starts at the day it was added"
    assert not hasattr(got, "secret_access_key") and SECRET not in repr(got)
    assert [e.id for e in store.list_exports()] == [a, b]
    assert [e.id for e in store.list_exports(account_id="globex")] == [b]
    store.set_status(b, "deleted", DAY0 + 1)
    assert [e.id for e in store.list_exports()] == [a]
    assert [e.id for e in store.list_exports(include_deleted=True)] == [a, b]
    assert [e.id for e in store.active_exports()] == [a]
    with pytest.raises(NotFound):
        store.get_export("exp_missing")
    # Datasets added later start from the time they are added.
    any_world.clock.advance(HOUR_MS + 123)
    added = store.add_dataset(a, "custom_events", any_world.clock())
    state = added.dataset_state("custom_events")
    assert state is not None and state.position_ms == DAY0 + HOUR_MS + 123 == state.added_at


def test_credentials_encrypted_at_rest(any_world: World) -> None:
    export_id = create(any_world)
    with any_world.control_engine.connect() as conn:
        raw = [tuple(map(str, r)) for r in conn.execute(sa.text("SELECT * FROM exports"))]
    assert raw and not any(SECRET in value for row in raw for value in row)
    config, version = any_world.store.destination_config(export_id)
    assert config.secret_access_key == SECRET and version == 1
    assert SECRET not in repr(config)


def test_ciphertext_is_bound_to_its_export(any_world: World) -> None:
    a = create(any_world, "acme")
    b = create(any_world, "globex", destination=s3(secret="another-secret"))
    with any_world.control_engine.begin() as conn:
        sealed = conn.execute(sa.text("SELECT secret_ciphertext FROM exports WHERE id = :a"), {"a": a}).scalar_one()
        conn.execute(sa.text("UPDATE exports SET secret_ciphertext = :s WHERE id = :b"), {"s": sealed, "b": b})
    with pytest.raises(SecretKeyError) as err:
        any_world.store.destination_config(b)
    assert b in str(err.value) and SECRET not in str(err.value)
    assert any_world.store.destination_config(a)[0].secret_access_key == SECRET


def test_key_rotation(any_world: World) -> None:
    a = create(any_world, "acme")
    b = create(any_world, "globex", destination=s3(secret="another-secret"))
    old_spec = "t1:" + __import__("base64").b64encode(any_world.box.keys["t1"]).decode()
    new_spec = new_key_spec("t2")
    rotating = ControlPlane(any_world.control_engine, SecretBox.parse(f"{new_spec},{old_spec}"))
    assert rotating.destination_config(a)[0].secret_access_key == SECRET, "old key still opens before rotation"
    assert rotating.rotate_secrets().resealed == 2
    assert rotating.rotate_secrets().resealed == 0
    rotated = ControlPlane(any_world.control_engine, SecretBox.parse(new_spec))
    assert rotated.destination_config(a)[0].secret_access_key == SECRET
    assert rotated.destination_config(b)[0].secret_access_key == "another-secret"
    with pytest.raises(SecretKeyError, match="'t2'"):
        any_world.store.destination_config(a)  # the old key alone no longer opens it


def test_position_moves_only_along_the_chain_with_the_commit(any_world: World) -> None:
    store = any_world.store
    export_id = create(any_world)
    first = Window(DAY0, DAY0 + 15 * MINUTE_MS)
    second = Window(first.to_ms, first.to_ms + 15 * MINUTE_MS)
    # A window that does not start at the position is recorded but does not move it.
    w2 = store.start_window(export_id, "email_events", second, run_id="r1", location="loc", now_ms=DAY0)
    assert store.commit_window(w2, rows=1, part_count=1, size=10, now_ms=DAY0) is False
    assert store.get_export(export_id).dataset_state("email_events").position_ms == DAY0  # type: ignore[union-attr]
    # Recorded parts and a started window move nothing either.
    w1 = store.start_window(export_id, "email_events", first, run_id="r1", location="loc", now_ms=DAY0)
    store.record_part_intent(
        w1, number=0, key="k0", kind="range", last=("t", "id5"), rows=5, size=10, md5="m", ids=b"", now_ms=DAY0
    )
    assert store.get_export(export_id).dataset_state("email_events").position_ms == DAY0  # type: ignore[union-attr]
    [part] = store.window_parts(export_id, "email_events", first, "loc")
    assert (part.number, part.landed, part.last) == (0, False, ("t", "id5"))
    store.mark_part_landed(w1, 0, DAY0)
    assert store.window_parts(export_id, "email_events", first, "loc")[0].landed
    assert store.get_export(export_id).dataset_state("email_events").position_ms == DAY0  # type: ignore[union-attr]
    assert store.commit_window(w1, rows=5, part_count=1, size=10, now_ms=DAY0) is True
    state = store.get_export(export_id).dataset_state("email_events")
    assert state is not None and state.position_ms == first.to_ms
    # Committing the same window again (a backfill rewrite) does not move the position.
    again = store.start_window(export_id, "email_events", first, run_id="r2", location="loc", now_ms=DAY0)
    assert store.commit_window(again, rows=5, part_count=1, size=10, now_ms=DAY0) is False
    assert store.committed_windows(export_id, "email_events", "2026-09-30") == [first, second]
    # Another dataset's position is its own.
    assert store.get_export(export_id).dataset_state("subscribers").position_ms == DAY0  # type: ignore[union-attr]


def _block_position_updates(world: World) -> None:
    """A trigger that fails every position update: the commit's transaction must then roll back whole."""
    with world.control_engine.begin() as conn:
        if world.control_engine.dialect.name == "sqlite":
            conn.execute(
                sa.text(
                    "CREATE TRIGGER block_position BEFORE UPDATE OF position_ms ON export_datasets "
                    "BEGIN SELECT RAISE(ABORT, 'position blocked'); END"
                )
            )
        else:
            conn.execute(
                sa.text(
                    "CREATE FUNCTION block_position() RETURNS trigger AS $$ BEGIN "
                    "IF NEW.position_ms <> OLD.position_ms THEN RAISE EXCEPTION 'position blocked'; END IF; "
                    "RETURN NEW; END $$ LANGUAGE plpgsql"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE TRIGGER block_position BEFORE UPDATE ON export_datasets "
                    "FOR EACH ROW EXECUTE FUNCTION block_position()"
                )
            )


def test_ledger_and_position_commit_in_one_transaction(any_world: World) -> None:
    store = any_world.store
    export_id = create(any_world)
    window = Window(DAY0, DAY0 + 15 * MINUTE_MS)
    window_id = store.start_window(export_id, "email_events", window, run_id="r1", location="loc", now_ms=DAY0)
    _block_position_updates(any_world)
    with pytest.raises(sa.exc.DatabaseError, match="position blocked"):
        store.commit_window(window_id, rows=3, part_count=1, size=10, now_ms=DAY0)
    (ledger,) = store.ledger(export_id)
    assert ledger.status == "running", "the ledger did not claim a window whose position update failed"
    assert store.committed_windows(export_id, "email_events", "2026-09-30") == []


def test_backoff_and_last_error_recorded_then_cleared(any_world: World) -> None:
    store = any_world.store
    export_id = create(any_world, frequency="15m")
    window = Window(DAY0, DAY0 + 15 * MINUTE_MS)
    waits = []
    for n in range(1, 8):
        now = DAY0 + n * HOUR_MS
        window_id = store.start_window(export_id, "email_events", window, run_id=f"r{n}", location="l", now_ms=now)
        state = store.fail_window(window_id, error=f"AccessDenied #{n}", now_ms=now)
        assert state is not None and state.failures == n
        assert state.last_error == f"AccessDenied #{n}" and state.last_error_at == now
        assert state.last_error_window == window
        assert state.next_retry_at is not None
        waits.append((state.next_retry_at - now) // MINUTE_MS)
    assert waits == [15, 30, 60, 120, 240, 360, 360]
    # Canceled attempts (pause, destination change) are not failures.
    window_id = store.start_window(export_id, "email_events", window, run_id="p", location="l", now_ms=DAY0)
    assert store.fail_window(window_id, error="paused", now_ms=DAY0, canceled=True) is None
    state = store.get_export(export_id).dataset_state("email_events")
    assert state is not None and state.failures == 7 and state.last_error == "AccessDenied #7"
    assert store.ledger(export_id)[-1].status == "canceled"
    # A transient failure the run itself still retries shows as failed but is not counted yet.
    window_id = store.start_window(export_id, "email_events", window, run_id="t", location="l", now_ms=DAY0)
    assert store.fail_window(window_id, error="SlowDown", now_ms=DAY0, count_failure=False) is None
    assert store.ledger(export_id)[-1].status == "failed"
    state = store.get_export(export_id).dataset_state("email_events")
    assert state is not None and state.failures == 7
    # The other dataset of the export is untouched.
    other = store.get_export(export_id).dataset_state("subscribers")
    assert other is not None and other.failures == 0 and other.last_error is None
    window_id = store.start_window(export_id, "email_events", window, run_id="ok", location="l", now_ms=DAY0)
    store.commit_window(window_id, rows=0, part_count=1, size=20, now_ms=DAY0 + 9 * HOUR_MS)
    state = store.get_export(export_id).dataset_state("email_events")
    assert state is not None
    assert (state.failures, state.next_retry_at, state.last_error, state.last_error_window) == (0, None, None, None)
    statuses = [w.status for w in store.ledger(export_id)]
    assert statuses == ["failed"] * 7 + ["canceled", "failed", "committed"]


def test_destination_update_bumps_version_and_reseals(any_world: World) -> None:
    store = any_world.store
    export_id = create(any_world)
    before = store.state(export_id)
    store.update_destination(export_id, s3(bucket="acme-new", secret="rotated-secret"), DAY0 + 5)
    after = store.state(export_id)
    assert after.destination_version == before.destination_version + 1
    config, version = store.destination_config(export_id)
    assert (config.bucket, config.secret_access_key, version) == (
        "acme-new",
        "rotated-secret",
        after.destination_version,
    )
    store.set_status(export_id, "paused", DAY0 + 6)
    assert store.state(export_id).status == "paused"
    assert store.state(export_id).destination_version == after.destination_version, "pausing is not a move"


def test_a_new_attempt_closes_attempts_left_running_by_a_dead_worker(world):
    from seqexport_dagster.contract.window import HOUR_MS, Window
    from seqexport_dagster.store import FAILED, RUNNING, WORKER_LOST

    export = world.local_export(datasets=("email_events",))
    window = Window(export.created_at, export.created_at + HOUR_MS)
    dead = world.store.start_window(export.id, "email_events", window, run_id="r1", location="x", now_ms=1)
    assert [w.status for w in world.store.ledger(export.id)] == [RUNNING]

    world.store.start_window(export.id, "email_events", window, run_id="r2", location="x", now_ms=2)

    ledger = {w.id: w for w in world.store.ledger(export.id)}
    assert (ledger[dead].status, ledger[dead].error, ledger[dead].finished_at) == (FAILED, WORKER_LOST, 2)
    assert [h.status for h in world.store.history(export.id, now_ms=3)] == ["running", "failed"]


def test_history_shows_the_last_14_days_only(world):
    from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, Window

    export = world.local_export(datasets=("email_events",))
    start = export.created_at
    for run, started in (("old", start), ("edge", start + DAY_MS), ("new", start + 10 * DAY_MS)):
        window = Window(start, start + HOUR_MS)
        window_id = world.store.start_window(
            export.id, "email_events", window, run_id=run, location="l", now_ms=started
        )
        world.store.commit_window(window_id, rows=3, part_count=1, size=40, now_ms=started + 1)

    now = start + 15 * DAY_MS
    assert [h.run_id for h in world.store.history(export.id, now)] == ["new", "edge"]
    assert [h.run_id for h in world.store.history(export.id, now + 1)] == ["new"]


def test_status_values_are_stored_as_their_plain_strings(any_world: World) -> None:
    """The status enums are `StrEnum`s: rows hold the same words as before, and read back equal."""
    from seqexport_dagster.store import PAUSED, ExportLifecycle, PartKind, PartStatus, WindowStatus
    from seqexport_dagster.store.tables import exports, parts, windows

    store = any_world.store
    export_id = create(any_world)
    store.set_status(export_id, PAUSED, any_world.clock())
    window = Window(DAY0, DAY0 + 15 * MINUTE_MS)
    window_id = store.start_window(export_id, "email_events", window, run_id="r1", location="loc", now_ms=DAY0)
    store.record_part_intent(
        window_id, number=0, key="k0", kind=PartKind.RANGE, last=None, rows=0, size=1, md5="m", ids=b"", now_ms=DAY0
    )
    store.commit_window(window_id, rows=0, part_count=1, size=1, now_ms=DAY0)
    with any_world.control_engine.connect() as conn:
        status = conn.execute(sa.select(exports.c.status)).scalar_one()
        window_status = conn.execute(sa.select(windows.c.status)).scalar_one()
        kind, part_status = conn.execute(sa.select(parts.c.kind, parts.c.status)).one()
    assert (status, window_status, kind, part_status) == ("paused", "committed", "range", "intent")
    assert type(status) is str and status == ExportLifecycle.PAUSED
    assert store.get_export(export_id).status == ExportLifecycle.PAUSED
    assert store.ledger(export_id)[0].status == WindowStatus.COMMITTED
    assert store.window_parts(export_id, "email_events", window, "loc")[0].status == PartStatus.INTENT


def test_committed_since_lists_each_committed_window_once_within_its_bounds(world: World) -> None:
    store = world.store
    export_id = create(world)
    q = 15 * MINUTE_MS
    w1, w2, w3 = (Window(DAY0 + i * q, DAY0 + (i + 1) * q) for i in range(3))
    for window, outcome in ((w1, "commit"), (w2, "commit"), (w2, "commit"), (w3, "fail")):
        window_id = store.start_window(export_id, "email_events", window, run_id="r", location="loc", now_ms=DAY0)
        if outcome == "commit":
            store.commit_window(window_id, rows=0, part_count=1, size=1, now_ms=DAY0)
        else:
            store.fail_window(window_id, error="boom", now_ms=DAY0)
    assert store.committed_since(export_id, "email_events", since_ms=DAY0, until_ms=w3.to_ms) == [w1, w2]
    assert store.committed_since(export_id, "email_events", since_ms=w1.to_ms, until_ms=w3.to_ms) == [w2]
    assert store.committed_since(export_id, "email_events", since_ms=DAY0, until_ms=w1.to_ms) == [w1]
    assert store.committed_since(export_id, "sms_events", since_ms=DAY0, until_ms=w3.to_ms) == []


def test_the_store_is_imported_through_its_package() -> None:
    """`records`, `exports`, `ledger` and `control_plane` are the store's inside: others use `store`."""
    import ast
    from pathlib import Path

    import seqexport_dagster

    root = Path(seqexport_dagster.__file__).parent.parent
    inside = {f"seqexport_dagster.store.{name}" for name in ("records", "exports", "ledger", "control_plane")}
    offenders = []
    for folder in ("seqexport_dagster", "seqexport_dagster_tests", "benchmarks"):
        for path in (root / folder).rglob("*.py"):
            if path.is_relative_to(root / "seqexport_dagster" / "store"):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module in inside:
                    offenders.append(f"{path.relative_to(root)}:{node.lineno}")
                elif isinstance(node, ast.Import):
                    offenders += [f"{path.relative_to(root)}:{node.lineno}" for a in node.names if a.name in inside]
    assert offenders == []
