"""The part writer of each file format (`file_format`): gzip JSONL (`writer`) or Parquet (`parquet_writer`).

Its own module so that `writer` and `parquet_writer` do not import each other, and pyarrow is loaded
only by a process that writes Parquet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from seqexport_dagster.contract.file_format import PARQUET, FileFormat
from seqexport_dagster.contract.schema import Dataset
from seqexport_dagster.delivery.writer import EMPTY_GZIP, PART_LIMIT, Part, PartWriter


class Writer(Protocol):
    """What cuts rows into parts: `PartWriter` (gzip JSONL) or `parquet_writer.ParquetPartWriter`."""

    def parts(self, batches: Iterable[Sequence[Any]], *, first: int = 0, empty: bool = True) -> Iterator[Part]: ...


def part_writer(fmt: FileFormat, ds: Dataset, part_limit: int = PART_LIMIT) -> Writer:
    if fmt == PARQUET:
        # Imported here: pyarrow costs ~0.2 s to import, and most exports never need it.
        from seqexport_dagster.delivery.parquet_writer import ParquetPartWriter

        return ParquetPartWriter(ds, part_limit)
    return PartWriter(ds, part_limit)


def empty_body(fmt: FileFormat, ds: Dataset) -> bytes:
    """A valid part with no rows: what a replace overwrites a surplus part number with."""
    if fmt == PARQUET:
        from seqexport_dagster.delivery.parquet_writer import empty_parquet

        return empty_parquet(ds)
    return EMPTY_GZIP
