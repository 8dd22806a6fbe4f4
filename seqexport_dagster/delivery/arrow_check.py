"""`values.RowChecker`'s guarantees over whole Arrow columns, for record batches read natively (ADBC).

A batch passes when every column already holds what the contract allows, checked per column in C
(``pyarrow.compute``):

- every field is present by name and in order; non-nullable fields hold no null;
- ``string`` fields are Arrow strings; ``integer`` fields are integers that fit in int64;
- ``timestamp`` fields match ``YYYY-MM-DDTHH:MM:SS.sssZ`` exactly (RE2, anchored), parse as a real
  instant (Arrow's cast refuses a 30 February or a 24th hour), and none is before year 0001;
- ``object`` and ``array`` fields go through the same C re-encoding as the row path
  (`values.json_column`): one compact JSON value each, or the batch fails.

A batch that fails any of these is handed, as rows, to `RowChecker` itself: either it finds the value
and raises the same `UntypeableValue` (export, dataset, row id, field) as every other path, or it
accepts the rows, and they are written exactly as the row path writes them. So a value the row path
would refuse is never written, and anything written is written as the row path would write it
(test_arrow_parquet.py compares the bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.delivery.values import Row, RowChecker, json_column

_FORM: Final = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$"
#: 0001-01-01T00:00:00.000Z in epoch milliseconds: the contract's first year (Arrow also parses 0000).
_YEAR_ONE_MS: Final = -62_135_596_800_000


class ArrowChecker:
    """Checks a dataset's Arrow batches and returns them in the Parquet schema (see the module)."""

    def __init__(
        self,
        ds: Dataset,
        schema: pa.Schema,
        builders: Sequence[Callable[[Sequence[Any]], pa.Array]],
        rows_to_batch: Callable[[Sequence[Row]], pa.RecordBatch],
    ) -> None:
        self.dataset = ds
        self.schema = schema
        self._builders = builders
        self._rows_to_batch = rows_to_batch
        self._check = RowChecker(ds)
        self._timestamp = pa.timestamp("ms", tz="UTC")

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        checked = self._columns(batch)
        if checked is not None:
            return pa.RecordBatch.from_arrays(checked, schema=self.schema)
        rows: list[Row] = list(zip(*(column.to_pylist() for column in batch.columns), strict=True))
        return self._rows_to_batch(self._check(rows))

    def _columns(self, batch: pa.RecordBatch) -> list[pa.Array] | None:
        fields = self.dataset.fields
        if batch.schema.names != [f.name for f in fields]:
            return None
        out: list[pa.Array] = []
        for f, column, build in zip(fields, batch.columns, self._builders, strict=True):
            if not f.nullable and column.null_count:
                return None
            kind = column.type
            if f.type == "string":
                if not pa.types.is_string(kind):
                    return None
                out.append(column)
            elif f.type == "timestamp":
                if not pa.types.is_string(kind) or not _all(pc.match_substring_regex(column, _FORM)):
                    return None
                try:
                    stamps = column.cast(self._timestamp)
                except pa.ArrowInvalid:
                    return None
                first = pc.min(stamps).value
                if first is not None and first < _YEAR_ONE_MS:
                    return None
                out.append(stamps)
            elif f.type == "integer":
                if not pa.types.is_integer(kind):
                    return None
                try:
                    out.append(column.cast(pa.int64()))
                except pa.ArrowInvalid:  # an unsigned value past int64
                    return None
            else:  # object / array: JSON text, re-encoded compactly as the row path does
                if not pa.types.is_string(kind):
                    return None
                values = json_column(column.to_pylist(), f.type)
                if values is None:
                    return None
                out.append(build(values))
        return out


def _all(mask: pa.Array) -> bool:
    """Every non-null entry is true (nulls were checked against nullability before)."""
    return bool(pc.all(mask).as_py() is not False)
