"""One part's content against the published schema: gzip members, then each row's fields and types."""

from __future__ import annotations

import re
from typing import Any, Final

from seqexport_dagster.contract.schema import TIMESTAMP_PATTERN, Dataset, Field

_TIMESTAMP = re.compile(TIMESTAMP_PATTERN)


_PY_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "string": (str,),
    "timestamp": (str,),
    "integer": (int,),
    "object": (dict,),
    "array": (list,),
}


def row_problem(ds: Dataset, row: Any) -> str | None:
    """Why a decoded row breaks the published schema (field set, order, types), or None."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    names = tuple(row)
    if names != ds.field_names:
        missing = [n for n in ds.field_names if n not in row]
        extra = [n for n in names if n not in ds.field_names]
        if missing or extra:
            return f"fields differ: missing {missing or 'none'}, unexpected {extra or 'none'}"
        return "fields are not in the published order"
    for f in ds.fields:
        wrong = _field_problem(f, row[f.name])
        if wrong:
            return f"{f.name}: {wrong}"
    return None


def _field_problem(f: Field, value: Any) -> str | None:
    if value is None:
        return None if f.nullable else "null where a value is required"
    if isinstance(value, bool) or not isinstance(value, _PY_TYPES[f.type]):
        return f"expected {f.type}, got {type(value).__name__}"
    if f.type == "timestamp" and not _TIMESTAMP.match(str(value)):
        return f"{value!r} is not YYYY-MM-DDTHH:MM:SS.mmmZ"
    if isinstance(value, list) and not all(isinstance(v, str) for v in value):
        return "expected an array of strings"
    if f.enum and value not in f.enum:
        return f"{value!r} is not one of {', '.join(f.enum)}"
    if f.max_length is not None and isinstance(value, str) and len(value) > f.max_length:
        return f"longer than {f.max_length} characters"
    return None
