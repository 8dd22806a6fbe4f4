"""`values.RowChecker`'s guarantees over whole Arrow columns, for record batches read natively
(PostgreSQL's CSV COPY parsed by Arrow, or ADBC's binary COPY).

A batch passes when every column already holds what the contract allows, checked per column over
the column's own buffers (NumPy; not ``pyarrow.compute``, +8 MB resident in every worker, measured):

- every field is present by name and in order; non-nullable fields hold no null;
- ``string`` fields are Arrow strings; ``integer`` fields are signed integers (widened to int64);
- ``timestamp`` fields are exactly ``YYYY-MM-DDTHH:MM:SS.sssZ`` (24 bytes, digits and separators in
  place) and a real instant of years 0001-9999 (month, day of that month in that year, hour, minute,
  second in range), parsed by the row path's own arithmetic (`timestamp_text`);
- ``object`` and ``array`` fields go through the same C re-encoding as the row path
  (`values.json_column`): one compact JSON value each, or the batch fails.

A batch that fails any of these is handed, as rows, to `RowChecker` itself: either it finds the value
and raises the same `UntypeableValue` (export, dataset, row id, field) as every other path, or it
accepts the rows, and they are written exactly as the row path writes them. So a value the row path
would refuse is never written, and anything written is written as the row path would write it
(test_arrow_parquet.py compares the bytes). The rows hold what psycopg2 would hand the row path
(`_python_values`: a ``numeric`` as ``Decimal``, not ADBC's text), and a value Python cannot hold
(a ``timestamptz`` of ``infinity``) as one `RowChecker` refuses in any field: never a bare error.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np
import pyarrow as pa

from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.delivery.timestamp_text import civil_fields, epoch_millis
from seqexport_dagster.delivery.values import Row, RowChecker, json_column

_TIMESTAMP: Final = pa.timestamp("ms", tz="UTC")  # the Parquet schema's (`parquet_writer.TIMESTAMP`)
_WIDTH: Final = len("2026-09-30T12:34:56.789Z")
_DIGITS: Final = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
_FIXED_AT: Final = [4, 7, 10, 13, 16, 19, 23]
_FIXED: Final = np.frombuffer(b"--T::.Z", dtype=np.uint8)
_MONTH_DAYS: Final = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_NARROW: Final = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32}


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

    def __call__(self, batch: pa.RecordBatch | Sequence[Row]) -> pa.RecordBatch:
        """``batch`` checked, in the Parquet schema; rows (a source that went on as rows after Arrow
        batches: `sqlite_read._NotPlain`) go through `RowChecker` as on the row path."""
        if not isinstance(batch, pa.RecordBatch):
            return self._rows_to_batch(self._check(batch))
        checked = self._columns(batch)
        if checked is not None:
            return pa.RecordBatch.from_arrays(checked, schema=self.schema)
        rows: list[Row] = list(zip(*map(_python_values, batch.columns), strict=True))
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
                stamps = _timestamps(column)
                if stamps is None:
                    return None
                out.append(stamps)
            elif f.type == "integer":
                wide = _int64(column)
                if wide is None:
                    return None
                out.append(wide)
            else:  # object / array: JSON text, re-encoded compactly as the row path does
                if not pa.types.is_string(kind):
                    return None
                values = json_column(column.to_pylist(), f.type)
                if values is None:
                    return None
                out.append(build(values))
        return out


def _present(column: pa.Array) -> np.ndarray[Any, Any] | None:
    """Which entries are not null (``None``: all of them), from the validity bitmap."""
    validity = column.buffers()[0]
    if validity is None or not column.null_count:
        return None
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little", count=len(column))
    present: np.ndarray[Any, Any] = bits.astype(np.bool_)
    return present


def _timestamps(column: pa.Array) -> pa.Array | None:
    """The column as ``timestamp[ms, UTC]`` if every value is in the contract's exact form and a real
    instant of years 0001-9999, else ``None`` (the rows then go to `RowChecker`, which names the value
    or accepts it: this check refuses nothing the row path would write differently)."""
    if not pa.types.is_string(column.type) or column.offset:  # sliced: not what the driver hands over
        return None
    n = len(column)
    validity, offsets_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32, count=n + 1)
    starts, lengths = offsets[:-1], np.diff(offsets)
    present = _present(column)
    if present is not None:
        starts, lengths = starts[present], lengths[present]
    if (lengths != _WIDTH).any():
        return None
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    if present is None:  # every value 24 bytes, back to back: the column's bytes are the matrix
        text = data[offsets[0] : offsets[0] + n * _WIDTH].reshape(n, _WIDTH)
    else:
        text = data[starts[:, None] + np.arange(_WIDTH)]
    if (text[:, _DIGITS] - 48 > 9).any() or (text[:, _FIXED_AT] != _FIXED).any():  # uint8: below "0" wraps
        return None
    fields = civil_fields(text)
    year, month, day, hour, minute, second, _ = fields
    if len(text) and not (
        (year >= 1).all() and ((month >= 1) & (month <= 12)).all() and (hour <= 23).all()
        and (minute <= 59).all() and (second <= 59).all()
    ):  # fmt: skip
        return None
    if len(text):
        leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
        if ((day < 1) | (day > _MONTH_DAYS[month - 1] + ((month == 2) & leap))).any():
            return None
    millis = epoch_millis(*fields)
    if present is not None:
        spread = np.zeros(n, dtype=np.int64)
        spread[present] = millis
        millis = spread
    return pa.Array.from_buffers(_TIMESTAMP, n, [validity if present is not None else None, pa.py_buffer(millis)])


def _int64(column: pa.Array) -> pa.Array | None:
    """A signed integer column as int64 (ADBC reads PostgreSQL's ``integer`` as int32), else ``None``."""
    if column.type == pa.int64():
        return column
    narrow = _NARROW.get(column.type)
    if narrow is None or column.offset:
        return None
    validity, data = column.buffers()
    wide = np.frombuffer(data, dtype=narrow, count=len(column)).astype(np.int64)
    return pa.Array.from_buffers(pa.int64(), len(column), [validity if column.null_count else None, pa.py_buffer(wide)])


class _Unreadable:
    """A value Python cannot hold (ADBC's ``timestamptz`` ``infinity``: ``to_pylist`` raised a bare
    ``OverflowError``); `RowChecker` refuses it in every field type, so the row is named."""

    __slots__ = ()


_UNREADABLE: Final = _Unreadable()


def _python_values(column: pa.Array) -> list[Any]:
    """The column's values as the row path's driver (psycopg2) hands them over, for `RowChecker`: its
    ``numeric`` as ``Decimal`` (ADBC's opaque extension holds the text, which a ``string`` field would
    otherwise take, where the JSONL path refuses it), and a value Python cannot hold as `_UNREADABLE`
    (searched value by value only when the column's conversion failed)."""
    kind = column.type
    if isinstance(kind, pa.OpaqueType) and kind.type_name == "numeric":
        return [None if v is None else _decimal(v) for v in column.storage.to_pylist()]
    try:
        values: list[Any] = column.to_pylist()
    except (OverflowError, ValueError, pa.ArrowException):
        values = [_scalar(column, i) for i in range(len(column))]
    return values


def _decimal(text: str) -> Any:
    try:
        return decimal.Decimal(text)
    except decimal.InvalidOperation:
        return _UNREADABLE


def _scalar(column: pa.Array, i: int) -> Any:
    try:
        return column[i].as_py()
    except (OverflowError, ValueError, pa.ArrowException):
        return _UNREADABLE
