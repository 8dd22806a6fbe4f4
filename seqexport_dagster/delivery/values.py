"""Source values checked against the row contract before any format writes them (issue 39).

Both writers (gzip JSONL and Parquet) pass every source batch through one `RowChecker`, so no two
formats ever disagree about what a row holds, and a value neither can type stops the window with a
specific error instead of an ``internal error`` on every retry:

- ``object`` and ``array`` fields (``properties``, ``attributes``, ``tags``) arrive as JSON text and are
  *re-serialized*, never pasted: each must be exactly one JSON object (one JSON array of strings for
  ``array``), and is re-encoded compactly on one line (``msgspec.json.format``, which validates the
  whole text in C without building Python objects). Text that is not one such value (a newline that
  would split the line, trailing text such as ``{},"id":"evt_X"`` that would add or replace a field)
  is refused: it can no longer forge a row or an id.
- ``timestamp`` fields must be the contract's text form, RFC 3339 in UTC with milliseconds
  (``2026-09-30T12:34:56.789Z``, years 0001-9999); ``integer`` fields 64-bit integers; ``string``
  fields strings; non-nullable fields present. A driver's own types (an operator's view with a
  ``timestamptz``, ``numeric``, ``bytea``, ``uuid``, ``json`` column: ``datetime``, ``Decimal``,
  ``bytes``, ``UUID``, ``dict``…) are refused in every field type like any other value.

The policy for a value that breaks this (documented in docs/operators.md and docs/customers.md): the
window fails with `UntypeableValue`, a permanent error naming the export, dataset, window, row id and
field (never the value, which may be personal data), shown in the status, history, webhooks and the
Dagster run. Nothing is dropped or altered silently; the export retries the window after its backoff
once the row is fixed at the source (or its view).

Cost: one ``msgspec.convert`` of the whole batch against a typed row tuple (in C), the timestamps'
fixed characters compared per column, and one re-encoding per JSON value; the slow path that finds
the offending row runs only when a check fails. Measured on email events: about 0.4 CPU-s per
million rows (benchmarks/writer_checks.py).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gc
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Annotated, Any, Final

import msgspec

from seqexport_dagster.contract.schema import Dataset, Field
from seqexport_dagster.errors import UntypeableValue

Row = Sequence[Any]

#: What each contract type accepts, in the words of the error.
ACCEPTED: Final[dict[str, str]] = {
    "string": "a text value",
    "timestamp": "a UTC timestamp in the contract's form YYYY-MM-DDTHH:MM:SS.sssZ (years 0001-9999)",
    "integer": "a 64-bit integer",
    "object": "one JSON object",
    "array": "one JSON array of strings",
}
_TIMESTAMP_LENGTH: Final = len("2026-09-30T12:34:56.789Z")
_INT64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
_AWARE = Annotated[dt.datetime, msgspec.Meta(tz=True)]
_TYPES: Final[dict[str, Any]] = {"string": str, "timestamp": _AWARE, "integer": _INT64, "object": Any, "array": Any}
_AT: Final = re.compile(r"\$\[(\d+)\]\[(\d+)\]")
_format = msgspec.json.format
_tags = msgspec.json.Decoder(list[str]).decode


def _row_type(ds: Dataset) -> Any:
    """A row as a typed tuple: what ``msgspec.convert`` checks a whole batch against in one C call."""
    kinds = [_TYPES[f.type] | None if f.nullable else _TYPES[f.type] for f in ds.fields]
    return tuple[tuple(kinds)]  # type: ignore[misc]


def _bad_form(values: list[Any], nullable: bool) -> int | None:
    """The index of the first timestamp (already valid RFC 3339 with a zone) not in the contract's
    exact form ``YYYY-MM-DDTHH:MM:SS.sssZ``: the fixed characters are compared over the whole column
    at once, and a column that fails is searched value by value.

    A timezone-aware ``datetime`` passes ``convert`` as well (a driver's ``timestamptz``: an operator's
    view that does not cast to text): the join then refuses it with ``TypeError``, and the search
    names it, as it is not text (it failed with a bare ``TypeError`` here before: issue 39)."""
    present = [v for v in values if v is not None] if nullable else values
    n, step = len(present), _TIMESTAMP_LENGTH
    try:
        joined = "".join(present)
    except TypeError:  # not all text: found below
        pass
    else:
        if len(joined) == n * step and joined[10::step] == "T" * n and joined[19::step] == "." * n:
            if joined[23::step] == "Z" * n:
                return None
    shape = ("T", ".", "Z")
    return next(
        i
        for i, v in enumerate(values)
        if v is not None and (not isinstance(v, str) or len(v) != step or (v[10], v[19], v[23]) != shape)
    )


_raws = msgspec.json.Decoder(list[msgspec.Raw]).decode
_tag_lists = msgspec.json.Decoder(list[list[str]]).decode


def json_column(values: list[Any], kind: str) -> list[Any] | None:
    """A column of JSON texts, each re-encoded compactly, in two C calls over the whole column: the
    texts joined into one JSON array, compacted by ``format``, split back into exactly as many values
    (a text holding more than one value, such as ``{},"id":"x"``, changes the count). ``None`` when
    anything is off: the caller then checks value by value (`json_value`) to name the row."""
    present = [v for v in values if v is not None]
    if not present:
        return values
    try:
        joined = ("[" + ",".join(present) + "]").encode("utf-8", "surrogatepass")
        compact = _format(joined, indent=-1)
        parts = _raws(compact)
        if kind == "array":
            _tag_lists(compact)
    except (TypeError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    opener = b"{" if kind == "object" else b"["
    texts = [bytes(raw) for raw in parts]
    if len(texts) != len(present) or any(t[:1] != opener for t in texts):
        return None
    decoded = iter([t.decode() for t in texts])
    return [None if v is None else next(decoded) for v in values] if len(present) < len(values) else list(decoded)


def json_value(value: Any, kind: str) -> str:
    """One JSON object (``kind`` "object") or array of strings ("array") as compact text on one line;
    raises ``ValueError`` (``TypeError`` for a value that is not text) for anything else: more than one
    value, another JSON type, invalid JSON."""
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
    else:
        raise TypeError("not JSON text")
    try:
        compact = _format(raw, indent=-1)
        if kind == "array":
            _tags(compact)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ValueError(str(exc)) from None
    if compact[:1] != (b"{" if kind == "object" else b"["):
        raise ValueError("another JSON type")
    return compact.decode()


class _CollectorPause:
    """Who is inside `_collector_paused` now, and whether the collector was on when the first came.

    The collector is the process's, and a batch run checks several exports' rows in threads at
    once: a bare ``isenabled()``/``disable()``/``enable()`` per call can interleave so that the last
    thread out finds it off and leaves it off for good (a review found the order; a test runs it)."""

    lock = threading.Lock()
    inside = 0
    was_enabled = False


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    with _CollectorPause.lock:
        if _CollectorPause.inside == 0:
            _CollectorPause.was_enabled = gc.isenabled()
            gc.disable()
        _CollectorPause.inside += 1
    try:
        yield
    finally:
        with _CollectorPause.lock:
            _CollectorPause.inside -= 1
            if _CollectorPause.inside == 0 and _CollectorPause.was_enabled:
                gc.enable()


class RowChecker:
    """Checks and normalises a dataset's source batches (see the module's docstring)."""

    def __init__(self, ds: Dataset) -> None:
        self.dataset = ds
        self._id_at = ds.field_names.index("id")
        self._batch_type = list[_row_type(ds)]  # type: ignore[misc]  # built once: msgspec caches by type
        self._timestamps = [(i, f) for i, f in enumerate(ds.fields) if f.type == "timestamp"]
        self._json = [(i, f) for i, f in enumerate(ds.fields) if f.type in ("object", "array")]

    def __call__(self, batch: Sequence[Row]) -> Sequence[Row]:
        """The batch, its JSON values re-encoded; raises `UntypeableValue` for the first bad value."""
        if not batch:
            return batch
        # The collector paused: ``convert`` builds a typed copy of the batch (one tuple per row) that is
        # freed as soon as it returns, and those allocations otherwise trigger a collection every 700
        # tuples (measured: 10 % of the Parquet writer's CPU, all of it spent finding no cycles).
        try:
            with _collector_paused():
                msgspec.convert(batch, self._batch_type)
        except msgspec.ValidationError as exc:
            found = _AT.search(str(exc))
            at, field = (int(found.group(1)), int(found.group(2))) if found else (0, self._id_at)
            raise self._error(batch[at], self.dataset.fields[field]) from None
        for i, f in self._timestamps:
            bad = _bad_form([row[i] for row in batch], f.nullable)
            if bad is not None:
                raise self._error(batch[bad], f)
        if not self._json:
            return batch
        columns: dict[int, list[Any]] = {}
        for i, f in self._json:
            column = json_column([row[i] for row in batch], f.type)
            if column is None:  # name the first bad value
                for row in batch:
                    if row[i] is not None:
                        # Text only, as `json_column` takes it: a driver's ``bytes``, ``dict`` or ``list``
                        # (bytea, json without ``::text``) is this row's fault, not the batch's first.
                        if not isinstance(row[i], str):
                            raise self._error(row, f)
                        try:
                            json_value(row[i], f.type)
                        except (ValueError, TypeError):
                            raise self._error(row, f) from None
                raise self._error(batch[0], f)  # unreachable: the whole column failed, so one value does
            columns[i] = column
        if len(columns) == 1:
            ((i, column),) = columns.items()
            return [(*row[:i], value, *row[i + 1 :]) for row, value in zip(batch, column, strict=True)]
        out: list[Row] = []
        for n, row in enumerate(batch):
            values = list(row)
            for i, column in columns.items():
                values[i] = column[n]
            out.append(tuple(values))
        return out

    def _error(self, row: Row, f: Field) -> UntypeableValue:
        row_id = row[self._id_at] if len(row) > self._id_at else None
        shown = row_id if isinstance(row_id, str) else "(no valid id)"
        return UntypeableValue(self.dataset.name, shown, f.name, ACCEPTED[f.type])
