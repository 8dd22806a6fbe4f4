"""The Delta Lake log of a dataset, as bytes: commit files and checkpoints (pure; no I/O).

A table (``--table delta``, Parquet exports only) is the dataset folder itself: its root is
``<prefix>/<dataset>/``, its data files are the Parquet parts already there under ``date=YYYY-MM-DD/``
(``date`` is the partition column, as the Hive folders say; no row field is named ``date``, DESIGN
§8), and its log is ``<prefix>/<dataset>/_delta_log/``. Paths in the log are relative to the root:
``date=2026-09-30/email_events-<fromMs>-<toMs>-0000.parquet``.

What is written (Delta protocol, reader version 1, writer version 2; no table features):
- version 0 carries ``protocol`` and ``metaData`` (the schema of `parquet_writer.arrow_schema`, the
  published Parquet schema; partition column ``date``) with the first files;
- every commit carries a ``txn`` (app id = the export id, version = the ledger attempt that wrote
  it, increasing per table) and ``commitInfo``; ``add`` actions name a part, its partition value,
  size, a modification time, ``dataChange: true`` and statistics; ``remove`` actions are logical
  (the file stays; readers skip it);
- a checkpoint (``NNNNNNNNNNNNNNNNNNNN.checkpoint.parquet``, the classic single-file kind) every
  `CHECKPOINT_INTERVAL` versions, holding the table's state at that version. ``_last_checkpoint``
  is never written: it is the one file of the protocol that is rewritten in place. Readers find the
  newest checkpoint by listing ``_delta_log`` (`docs/customers.md`, "Reading the Delta table").

Statistics are exact for ``numRecords``. The part ledger keeps no column values (parts are never
read back), so the bounds on ``recorded_at`` are the window's: every row of a window's part has
``from_ms < recorded_at <= to_ms`` (DESIGN §3), a valid, conservative bound that prunes by time.
"""

from __future__ import annotations

import functools
import io
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from seqexport_dagster.contract.schema import DATASETS, Dataset
from seqexport_dagster.contract.table_format import DELTA as DELTA
from seqexport_dagster.contract.window import iso_ms

LOG_FOLDER: Final = "_delta_log"
#: Table-only data files (`table_moves.table_carry`): rows whose part landed at a place the export left
#: before that place's table took them, or of a window whose replace there did not finish (it took the
#: window out of that table first), cut again and added to the table here. No file loader sees
#: them: the documented globs and patterns all need a ``date=`` folder (``<dataset>/date=*/*.parquet``,
#: Snowflake's ``.*date=[^/]*/[^/]*[.]parquet``, BigQuery's ``<dataset>/date=*.parquet``), there is
#: none in these paths, and Spark skips folders starting with ``_``. Delta readers read whatever an
#: ``add`` names, with the partition value the ``add`` gives.
ROWS_FOLDER: Final = "_delta_rows"
PARTITION_COLUMN: Final = "date"
#: A checkpoint every this many versions (Spark's and delta-rs's default is 10 or 100; at one commit
#: per window with rows, 100 versions is a day of 15-minute windows: benchmarks/delta_log.py).
CHECKPOINT_INTERVAL: Final = 100
ENGINE: Final = "sequenzy-data-exports"
_NAMESPACE: Final = uuid.UUID("5b8c8d3e-3f0b-4a51-9d0e-2f7b8f0c4a44")


def table_root(prefix: str, dataset: str) -> str:
    return f"{prefix}/{dataset}/" if prefix else f"{dataset}/"


def rows_path(day: str, part_name: str) -> str:
    """The table path of a table-only file (`ROWS_FOLDER`): ``_delta_rows/YYYY-MM-DD/<part name>``."""
    return f"{ROWS_FOLDER}/{day}/{part_name}"


def commit_key(prefix: str, dataset: str, version: int) -> str:
    return f"{table_root(prefix, dataset)}{LOG_FOLDER}/{version:020d}.json"


def checkpoint_key(prefix: str, dataset: str, version: int) -> str:
    return f"{table_root(prefix, dataset)}{LOG_FOLDER}/{version:020d}.checkpoint.parquet"


def relative_path(prefix: str, dataset: str, key: str) -> str:
    root = table_root(prefix, dataset)
    if not key.startswith(root):
        raise ValueError(f"{key!r} is outside the table at {root!r}")
    return key[len(root) :]


def table_id(export_id: str, dataset: str, location: str) -> str:
    """The ``metaData.id``: stable for a table (one per export, dataset and place)."""
    return str(uuid.uuid5(_NAMESPACE, f"{export_id}/{dataset}/{location}"))


_DELTA_TYPES: Final[dict[str, Any]] = {
    "string": "string",
    "timestamp": "timestamp",
    "integer": "long",
    "object": "string",
    "array": {"type": "array", "elementType": "string", "containsNull": True},
}


def schema_string(ds: Dataset) -> str:
    """The Delta schema of the Parquet parts: `arrow_schema`'s fields, their order and nullability,
    then ``date`` (type ``date``), the partition column."""
    from seqexport_dagster.delivery.parquet_writer import arrow_schema  # pyarrow: see `_checkpoint_schema`

    arrow = arrow_schema(ds)
    fields = []
    for f in ds.fields:
        assert arrow.field(f.name).nullable == f.nullable
        fields.append({"name": f.name, "type": _DELTA_TYPES[f.type], "nullable": f.nullable, "metadata": {}})
    # The partition column is part of the table's schema (not of the files): the folder's UTC day.
    fields.append({"name": PARTITION_COLUMN, "type": "date", "nullable": False, "metadata": {}})
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class TableFile:
    """A data file of the table: a landed Parquet part (its path relative to the root)."""

    path: str
    date: str
    size: int
    rows: int
    from_ms: int
    to_ms: int


def stats(ds: Dataset, f: TableFile) -> str:
    out: dict[str, Any] = {"numRecords": f.rows}
    if f.rows and ds.field_names and "recorded_at" in ds.field_names:
        out["minValues"] = {"recorded_at": iso_ms(f.from_ms + 1)}
        out["maxValues"] = {"recorded_at": iso_ms(f.to_ms)}
        out["nullCount"] = {"recorded_at": 0}
    return json.dumps(out, separators=(",", ":"))


def add_action(ds: Dataset, f: TableFile, modification_ms: int) -> dict[str, Any]:
    return {
        "path": f.path,
        "partitionValues": {PARTITION_COLUMN: f.date},
        "size": f.size,
        "modificationTime": modification_ms,
        "dataChange": True,
        "stats": stats(ds, f),
    }


def remove_action(f: TableFile, deletion_ms: int) -> dict[str, Any]:
    return {
        "path": f.path,
        "deletionTimestamp": deletion_ms,
        "dataChange": True,
        "extendedFileMetadata": True,
        "partitionValues": {PARTITION_COLUMN: f.date},
        "size": f.size,
    }


def protocol_action() -> dict[str, Any]:
    return {"minReaderVersion": 1, "minWriterVersion": 2}


def metadata_action(ds: Dataset, table: str) -> dict[str, Any]:
    return {
        "id": table,
        "name": ds.name,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": schema_string(ds),
        "partitionColumns": [PARTITION_COLUMN],
        "configuration": {},
    }


def commit_body(
    *,
    version: int,
    dataset: str,
    table: str,
    app_id: str,
    txn: int,
    adds: Sequence[TableFile],
    removes: Sequence[TableFile],
    now_ms: int,
) -> bytes:
    """One commit file: newline-delimited actions. Deterministic for its inputs (a re-send is recorded
    bytes anyway: `table.TableWriter`)."""
    ds = DATASETS[dataset]
    actions: list[dict[str, Any]] = [
        {
            "commitInfo": {
                "timestamp": now_ms,
                "operation": "WRITE",
                "operationParameters": {"mode": "Append"},
                "engineInfo": ENGINE,
                "isBlindAppend": not removes,
            }
        }
    ]
    if version == 0:
        actions.append({"protocol": protocol_action()})
        actions.append({"metaData": metadata_action(ds, table)})
    actions.append({"txn": {"appId": app_id, "version": txn, "lastUpdated": now_ms}})
    actions += [{"remove": remove_action(f, now_ms)} for f in removes]
    actions += [{"add": add_action(ds, f, now_ms)} for f in adds]
    return "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode()


@functools.cache
def _checkpoint_schema() -> Any:
    """The classic checkpoint's Arrow schema. pyarrow is imported here, not with the module: every run
    worker imports this module through the runner, and pyarrow is ~40 MB a JSONL-only worker never
    needs (test_hostile_endpoint holds a worker under 150 MB)."""
    import pyarrow as pa

    _map = pa.map_(pa.string(), pa.string())
    return pa.schema(
        [
            pa.field("txn", pa.struct([("appId", pa.string()), ("version", pa.int64()), ("lastUpdated", pa.int64())])),
            pa.field(
                "add",
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("partitionValues", _map),
                        ("size", pa.int64()),
                        ("modificationTime", pa.int64()),
                        ("dataChange", pa.bool_()),
                        ("stats", pa.string()),
                    ]
                ),
            ),
            pa.field(
                "remove",
                pa.struct(
                    [
                        ("path", pa.string()),
                        ("deletionTimestamp", pa.int64()),
                        ("dataChange", pa.bool_()),
                        ("extendedFileMetadata", pa.bool_()),
                        ("partitionValues", _map),
                        ("size", pa.int64()),
                    ]
                ),
            ),
            pa.field(
                "metaData",
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("name", pa.string()),
                        ("format", pa.struct([("provider", pa.string()), ("options", _map)])),
                        ("schemaString", pa.string()),
                        ("partitionColumns", pa.list_(pa.string())),
                        ("configuration", _map),
                    ]
                ),
            ),
            pa.field("protocol", pa.struct([("minReaderVersion", pa.int32()), ("minWriterVersion", pa.int32())])),
        ]
    )


def _maps(action: dict[str, Any]) -> dict[str, Any]:
    """Maps as Arrow wants them from Python: lists of (key, value) pairs."""
    out = dict(action)
    for k in ("partitionValues", "configuration"):
        if k in out:
            out[k] = list(out[k].items())
    if "format" in out:
        out["format"] = {**out["format"], "options": list(out["format"]["options"].items())}
    return out


def checkpoint_body(
    *,
    dataset: str,
    table: str,
    app_id: str,
    txn: int,
    txn_ms: int,
    files: Iterable[TableFile],
    file_ms: int,
) -> bytes:
    """The table's state at a version as a classic checkpoint: protocol, metaData, the app's latest
    txn and one ``add`` per live file (removes are not kept: a checkpoint may drop tombstones once
    no reader needs them for vacuum, and nothing here is ever vacuumed)."""
    ds = DATASETS[dataset]
    rows: list[dict[str, Any]] = [
        {"protocol": protocol_action()},
        {"metaData": _maps(metadata_action(ds, table))},
        {"txn": {"appId": app_id, "version": txn, "lastUpdated": txn_ms}},
    ]
    rows += [{"add": _maps(add_action(ds, f, file_ms))} for f in files]
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _checkpoint_schema()
    columns = {name: [r.get(name) for r in rows] for name in schema.names}
    batch = pa.RecordBatch.from_pydict(columns, schema=schema)
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_batches([batch]), sink, compression="zstd")
    return sink.getvalue()
