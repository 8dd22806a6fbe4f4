"""Hostile Parquet parts and malformed manifests for `verify` (issue 41), planted in a local folder.

Each is small on disk and costly to read naively:

``rows``      a 20-odd KB ``email_events`` part whose footer claims (and whose pages hold) 1,000,000 rows
``claimed``   a zstd part of 900 rows whose ``subject`` is 1 MiB each, plain-encoded: about 30 KB of
              file whose footer claims 944 MB decompressed
``dictionary`` the same 900 rows dictionary-encoded: a few KB whose footer claims 1 MB, 944 MB once
              the dictionary is expanded
``malformed`` five windows with their parts and manifests, four manifests broken as the review broke
              them (`BROKEN`), and an object that does not belong

Built with pyarrow from the published Arrow schema (`parquet_writer.arrow_schema`), so every one
passes the schema check and is refused (or read) for its size alone.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from seqexport_dagster.contract.keys import MANIFEST_FORMAT_V1, manifest_key, part_key
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import HOUR_MS, Window
from seqexport_dagster.delivery.manifest import ManifestPart, manifest_body
from seqexport_dagster.delivery.parquet_writer import arrow_schema
from seqexport_dagster_tests.support.world import DAY0

WINDOW: Final = Window(DAY0, DAY0 + HOUR_MS)
KEY: Final = part_key("", "email_events", WINDOW, 0, "parquet")
MIB: Final = 1024 * 1024


def email_table(rows: int, subject: str = "s") -> pa.Table:
    """``rows`` rows of one repeated value per column (in the window, every field valid)."""
    schema = arrow_schema(DATASETS["email_events"])
    at = pa.array([DAY0 + 1000], type=pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
    same = np.zeros(rows, dtype=np.int64)
    values = {
        "id": pa.array(["eev_same"]),
        "event_type": pa.array(["delivered"]),
        "occurred_at": at,
        "recorded_at": at,
        "subject": pa.array([subject]),
    }
    columns = []
    for f in schema:
        one = values.get(f.name)
        columns.append(pa.nulls(rows, f.type) if one is None else one.take(same))
    return pa.Table.from_arrays(columns, schema=schema)


def parquet_bytes(table: pa.Table, *, dictionary: bool = True, row_group: int | None = None) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", use_dictionary=dictionary, row_group_size=row_group)
    return out.getvalue()


def plant(root: Path, body: bytes) -> Path:
    path = root / KEY
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path


def million_rows(root: Path, rows: int = 1_000_000) -> Path:
    return plant(root, parquet_bytes(email_table(rows), row_group=rows))


def claimed_bomb(root: Path) -> Path:
    return plant(root, parquet_bytes(email_table(900, "a" * MIB), dictionary=False))


def dictionary_bomb(root: Path) -> Path:
    return plant(root, parquet_bytes(email_table(900, "a" * MIB)))


#: Window number -> how its manifest is broken: a missing and a non-numeric ``chain_from_ms``, a part
#: entry without ``key`` and one without ``bytes``.
BROKEN: Final[dict[int, Callable[[dict[str, Any]], object]]] = {
    1: lambda doc: doc.pop("chain_from_ms"),
    2: lambda doc: doc.update(chain_from_ms="06:00"),
    3: lambda doc: doc["parts"][0].pop("key"),
    4: lambda doc: doc["parts"][0].pop("bytes"),
}


def hour(n: int) -> Window:
    return Window(DAY0 + n * HOUR_MS, DAY0 + (n + 1) * HOUR_MS)


def malformed_manifests(root: Path) -> Path:
    body = gzip.compress(b"")
    for n in range(5):
        window = hour(n)
        key = part_key("", "email_events", window, 0)
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(body)
        part = ManifestPart(key, 0, 0, len(body), hashlib.md5(body).hexdigest())
        doc = json.loads(manifest_body("email_events", window, DAY0, [part]))
        # As bfe50bc wrote them (format /1, which verify still reads), so both revisions read them.
        doc["format"] = MANIFEST_FORMAT_V1
        del doc["continues"]
        if n in BROKEN:
            BROKEN[n](doc)
        target = root / manifest_key("", "email_events", window, 0)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(doc))
    stray = root / "email_events" / "date=2026-09-30" / "notes.txt"
    stray.write_text("hi")
    return stray
