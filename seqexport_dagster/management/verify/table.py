"""`verify` of the Delta tables beside the parts (issue 44): ``<dataset>/_delta_log/``.

From the bucket alone: commit versions run 0, 1, 2, ... without a gap; every file a live ``add``
names is in the bucket with that size; no path is added twice without a ``remove`` between (an
operator's replace re-adds a part it overwrote with another size or row count, which the protocol
reads as the newest ``add`` winning: allowed); each ``add``'s ``numRecords`` equals the rows of the
part as `verify` read it (of a table-only file under ``_delta_rows/``, its footer's count). With
``--ledger``: the table's live files and rows equal what the control plane says the exporter
committed at this place (files of a commit not landed yet left out).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from seqexport_dagster.errors import ObjectTooLarge
from seqexport_dagster.management.verify.bucket import Bucket, StoredObject
from seqexport_dagster.management.verify.parquet_rows import parquet_row_count
from seqexport_dagster.management.verify.report import Problem

if TYPE_CHECKING:  # the remote CLI's `verify --ledger` must not load the control plane (test_remote_cli_imports)
    from seqexport_dagster.store import ControlPlane

LOG: Final = "_delta_log"
ROWS: Final = "_delta_rows"
_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")


def is_log_object(key: str) -> bool:
    parts = key.split("/")
    return len(parts) == 3 and parts[1] == LOG


def is_table_object(key: str) -> bool:
    """A log object, or a table-only data file (``<dataset>/_delta_rows/<day>/<name>``: rows whose
    part landed at an earlier place of the export, cut again for the table here; no file loader
    reads that folder). Both are checked here, not as parts."""
    parts = key.split("/")
    return is_log_object(key) or (len(parts) == 4 and parts[1] == ROWS)


def verify_tables(
    bucket: Bucket,
    *,
    objects: list[StoredObject] | None = None,
    part_rows: Mapping[str, int] | None = None,
    ledger: tuple[ControlPlane, str] | None = None,
) -> list[Problem]:
    listed = bucket.list() if objects is None else objects
    sizes = {o.key: o.size for o in listed}
    logs: dict[str, dict[int, str]] = {}
    problems: list[Problem] = []
    for o in listed:
        if not is_log_object(o.key):
            continue
        dataset, _, name = o.key.split("/")
        m = _COMMIT.match(name)
        if m:
            logs.setdefault(dataset, {})[int(m.group(1))] = o.key
        elif not _CHECKPOINT.match(name):
            problems.append(Problem("table_unexpected_object", dataset, o.key, "not a commit or a checkpoint"))
    for dataset, commits in sorted(logs.items()):
        problems += _check_log(bucket, dataset, commits, sizes, part_rows or {}, ledger)
    return problems


def _check_log(
    bucket: Bucket,
    dataset: str,
    commits: dict[int, str],
    sizes: Mapping[str, int],
    part_rows: Mapping[str, int],
    ledger: tuple[ControlPlane, str] | None,
) -> list[Problem]:
    out: list[Problem] = []
    versions = sorted(commits)
    missing = sorted(set(range(versions[-1] + 1)) - set(versions))
    if missing:
        out.append(Problem("table_version_gap", dataset, commits[versions[-1]], f"versions missing: {missing[:10]}"))
    live: dict[str, dict[str, Any]] = {}
    for v in versions:
        for line in bucket.read(commits[v]).decode().splitlines():
            action = json.loads(line)
            if "add" in action:
                add = action["add"]
                before = live.get(add["path"])
                if before is not None and before["size"] == add["size"] and before.get("stats") == add.get("stats"):
                    out.append(
                        Problem("table_duplicate_add", dataset, add["path"], f"added again at version {v} unchanged")
                    )
                live[add["path"]] = add
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    rows: dict[str, int] = {}
    for path, add in sorted(live.items()):
        key = f"{dataset}/{path}"
        if key not in sizes:
            out.append(Problem("table_file_missing", dataset, key, "the log adds it; the bucket does not have it"))
            continue
        if sizes[key] != add["size"]:
            out.append(Problem("table_size_mismatch", dataset, key, f"log says {add['size']} B, bucket {sizes[key]} B"))
        n = int(json.loads(add.get("stats") or "{}").get("numRecords", -1))
        rows[path] = n
        if path.startswith(ROWS + "/") and key not in part_rows:
            # A table-only file is no part: its footer gives its rows (read once, here).
            footer = _footer_rows(bucket, dataset, key)
            if isinstance(footer, Problem):
                out.append(footer)
                continue
            part_rows = {**part_rows, key: footer}
        if key in part_rows and part_rows[key] != n:
            out.append(
                Problem("table_rows_mismatch", dataset, key, f"log says {n} rows, the part holds {part_rows[key]}")
            )
    # The table's files are the control plane's; the HTTP API (a customer's remote `verify --ledger`)
    # does not serve them, so there the log is checked against the bucket only.
    if ledger is not None and hasattr(ledger[0], "table_files"):
        store, export_id = ledger
        location = store.get_export(export_id).location
        # A commit claimed but not landed yet (its window is still being written, or was left at a
        # place the export moved from) is not in the bucket: the files it changes are left out.
        pending = {c.version for c in store.unlanded_table_commits(export_id, dataset, location)}
        files = store.table_files(export_id, dataset, location)
        moving = {f.path for f in files if f.version in pending}
        recorded = {f.path: f.rows for f in files if not f.removed and f.path not in moving}
        rows = {p: n for p, n in rows.items() if p not in moving}
        if recorded != rows:
            extra = sorted(set(rows) - set(recorded))[:3]
            lacking = sorted(set(recorded) - set(rows))[:3]
            differ = sorted(p for p in set(rows) & set(recorded) if rows[p] != recorded[p])[:3]
            out.append(
                Problem(
                    "table_ledger_mismatch",
                    dataset,
                    f"{dataset}/{LOG}",
                    f"table {sum(rows.values())} rows in {len(rows)} files, ledger {sum(recorded.values())} in "
                    f"{len(recorded)}; only in the table {extra}, only in the ledger {lacking}, rows differ {differ}",
                )
            )
    return out


def _footer_rows(bucket: Bucket, dataset: str, key: str) -> int | Problem:
    """The rows a table-only file's footer claims, or the problem reading it (within the bound)."""
    try:
        return parquet_row_count(bucket.read(key))
    except ObjectTooLarge as exc:
        return Problem("too_large", dataset, key, str(exc))
    except Exception as exc:  # pyarrow's errors for a body that is not Parquet
        return Problem("corrupt_parquet", dataset, key, f"{type(exc).__name__}: {str(exc)[:200]}")
