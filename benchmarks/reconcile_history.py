"""24 h of committed history for many exports, bulk-copied from exports the real runner delivered
(`benchmarks.reconcile_cost`, issue 29: building 1,000 exports slot by slot through the runner
would take hours).

How the rows are made, so that they are what the code writes:
1. every export is created through the control plane (`ControlPlane.create_export`: its row,
   its datasets, its destination fingerprint ``location``); the first account's source rows are
   generated, and copied to every other account (same ids: the source's keys are per account);
2. the first export (the template) and the second (its twin, on identical source rows) get their
   history from the real runner, slot by slot, as before;
3. every other export gets the template's windows and parts, ids and all, with ``INSERT ... SELECT``
   (its own export id, window ids and location), and the template's dataset states.
`differences` compares a copy with the twin field by field: what the runner wrote for the same rows
against what was copied. The destination folders of the copies stay empty: nothing after the
history reads what a window delivered before (the measured hour's rows are compared the same way).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa

from seqexport_dagster.contract.schema import DATASETS as SOURCE_TABLES
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster.store import tables
from seqexport_dagster_tests.support.world import World

#: Columns a copy has of its own; everything else must equal the twin's.
OWN = {"id", "window_id", "export_id", "account_id", "location", "bucket"}


def account(i: int) -> str:
    return f"acct{i:04d}"


def create_exports(world: World, n: int, datasets: tuple[str, ...], frequency: str, lag_ms: int) -> list[str]:
    """``n`` exports through the control plane, each to its own local folder; returns their ids."""
    return [
        world.local_export(account(i), datasets=datasets, frequency=frequency, lag_ms=lag_ms, folder=account(i)).id
        for i in range(n)
    ]


def generate_sources(world: World, n: int, start_ms: int, end_ms: int, scale: Scale) -> None:
    """The first account's rows generated, then copied to accounts 1..n-1 in bulk."""
    generate_account(world.source_engine, account(0), start_ms, end_ms, scale=scale)
    others = [account(i) for i in range(1, n)]
    if not others:
        return
    with world.source_engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE bench_accounts (account_id VARCHAR(64) PRIMARY KEY)"))
        conn.execute(sa.text("INSERT INTO bench_accounts VALUES (:a)"), [{"a": a} for a in others])
        for table in SOURCE_TABLES:
            names = [f.name for f in SOURCE_TABLES[table].fields]
            conn.execute(
                sa.text(
                    f"INSERT INTO {table} (account_id, {', '.join(names)}) SELECT c.account_id,"
                    f" {', '.join('t.' + n for n in names)} FROM {table} t, bench_accounts c WHERE t.account_id = :t"
                ),
                {"t": account(0)},
            )
        conn.execute(sa.text("DROP TABLE bench_accounts"))


def _columns(table: sa.Table) -> list[str]:
    return [c.name for c in table.columns if c.name not in OWN]


def copy_history(world: World, template: str, copies: list[str]) -> None:
    """The template's windows, parts and dataset states, copied to each export of ``copies``."""
    if not copies:
        return
    locations = {e.id: e.location for e in world.store.list_exports()}
    w_cols, p_cols = _columns(tables.windows), _columns(tables.parts)
    d_cols = [c for c in _columns(tables.export_datasets) if c != "dataset"]
    with world.control_engine.begin() as conn:
        lo, hi = conn.execute(
            sa.text("SELECT min(id), max(id) FROM windows WHERE export_id = :t"), {"t": template}
        ).one()
        base = conn.execute(sa.text("SELECT coalesce(max(id), 0) + 1 FROM windows")).scalar_one()
        conn.execute(
            sa.text("CREATE TABLE bench_copies (j INTEGER PRIMARY KEY, export_id VARCHAR(40), location VARCHAR(32))")
        )
        conn.execute(
            sa.text("INSERT INTO bench_copies VALUES (:j, :e, :l)"),
            [{"j": j, "e": e, "l": locations[e]} for j, e in enumerate(copies)],
        )
        p = {"t": template, "lo": lo, "span": hi - lo + 1, "base": base}
        new_id = "(:base + c.j * :span + (t.{col} - :lo))"
        conn.execute(
            sa.text(
                f"INSERT INTO windows (id, export_id, location, {', '.join(w_cols)})"
                f" SELECT {new_id.format(col='id')}, c.export_id, c.location, {', '.join('t.' + c for c in w_cols)}"
                " FROM windows t, bench_copies c WHERE t.export_id = :t"
            ),
            p,
        )
        conn.execute(
            sa.text(
                f"INSERT INTO parts (window_id, export_id, location, {', '.join(p_cols)})"
                f" SELECT {new_id.format(col='window_id')}, c.export_id, c.location,"
                f" {', '.join('t.' + c for c in p_cols)} FROM parts t, bench_copies c WHERE t.export_id = :t"
            ),
            p,
        )
        sets = ", ".join(
            f"{c} = (SELECT t.{c} FROM export_datasets t WHERE t.export_id = :t"
            " AND t.dataset = export_datasets.dataset)"
            for c in d_cols
        )
        conn.execute(
            sa.text(f"UPDATE export_datasets SET {sets} WHERE export_id IN (SELECT export_id FROM bench_copies)"), p
        )
        conn.execute(
            sa.text(
                "UPDATE exports SET updated_at = (SELECT updated_at FROM exports t WHERE t.id = :t)"
                " WHERE id IN (SELECT export_id FROM bench_copies)"
            ),
            p,
        )
        conn.execute(sa.text("DROP TABLE bench_copies"))
        if conn.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT setval('windows_id_seq', (SELECT max(id) FROM windows))"))


def rows_of(world: World, export_id: str, since_ms: int | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """An export's control-plane rows without the columns a copy has of its own, in a stable order
    (windows and parts from ``since_ms`` on, by start time, when given)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    when = "" if since_ms is None else " AND started_at >= :s"
    part_when = "" if since_ms is None else " AND written_at >= :s"
    queries = {
        "exports": (tables.exports, "id = :e", "id"),
        "export_datasets": (tables.export_datasets, "export_id = :e", "dataset"),
        "windows": (tables.windows, "export_id = :e" + when, "dataset, from_ms, started_at"),
        "parts": (tables.parts, "export_id = :e" + part_when, "dataset, from_ms, part, written_at"),
    }
    with world.control_engine.connect() as conn:
        for name, (table, where, order) in queries.items():
            cols = [c for c in _columns(table) if c not in ("created_at", "account_id")]
            out[name] = [
                tuple(r)
                for r in conn.execute(
                    sa.text(f"SELECT {', '.join(cols)} FROM {name} WHERE {where} ORDER BY {order}"),
                    {"e": export_id, "s": since_ms},
                )
            ]
    return out


def differences(world: World, real: str, generated: str, since_ms: int | None = None) -> list[str]:
    """Where a generated export's rows differ from a real one's (empty: field by field equal)."""
    a, b = rows_of(world, real, since_ms), rows_of(world, generated, since_ms)
    found = []
    for name in a:
        if len(a[name]) != len(b[name]):
            found.append(f"{name}: {len(a[name])} rows real, {len(b[name])} generated")
            continue
        for i, (x, y) in enumerate(zip(a[name], b[name], strict=True)):
            if x != y:
                found.append(f"{name}[{i}]: real {x!r:.300} != generated {y!r:.300}")
                break
    return found


def build(
    world: World,
    exports: int,
    *,
    datasets: tuple[str, ...],
    frequency: str,
    lag_ms: int,
    source_span: tuple[int, int],
    scale: Scale,
    slot_ends: Iterable[int],
    run_slot: Callable[[World, list[str], int], object],
) -> tuple[list[str], list[str]]:
    """The history for ``exports`` exports; returns (ids built by the runner, ids copied)."""
    ids = create_exports(world, exports, datasets, frequency, lag_ms)
    generate_sources(world, exports, *source_span, scale)
    real, copied = ids[:2], ids[2:]
    for end in slot_ends:
        run_slot(world, real, end)
    copy_history(world, real[0], copied)
    return real, copied
