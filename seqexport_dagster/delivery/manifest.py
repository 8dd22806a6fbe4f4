"""Window manifests: what a window holds, written to the bucket after its parts have landed.

One JSON object per delivery of a window, create-only, under
``<prefix>/_sequenzy/manifests/<dataset>/date=YYYY-MM-DD/`` (outside every dataset folder, so a
warehouse glob over ``<dataset>/`` never sees it; DESIGN §4 keeps dataset folders to parts and
``_SUCCESS``). It lists every landed part of the window (key, part number, rows, bytes, MD5 as hex,
which is the ETag of a single PUT) and the window's bounds, plus where the dataset's chain starts.

The chain start (``chain_from_ms``) is where the chain of windows the export delivered *at this
place as its own* starts: windows with a part ``0000`` here. After a destination change, late rows
of a window delivered at the earlier place land here as that window's next part numbers; such a
window continues the earlier place's chain, is marked ``"continues": true``, and never pulls the
start back (issue 47: it did, so a lost first window at the new place went unseen). Format
``sequenzy-manifest/2`` added ``continues`` and this meaning of the start; ``/1`` manifests took the
earliest window committed here, continuing ones included, and `verify.manifests` reads them with
that in mind. The format follows the row schemas' rule (CHANGELOG "Manifest format"): fields are
added with a new version, never renamed, retyped or removed, so a loader of ``/1`` reads ``/2``.

Order: the runner writes it after the window's last part landed and before the window commits
(`runner.write_window`). A manifest in the bucket therefore means "these parts are all of this
window as of now"; a crash between the manifest and the commit re-sends the same bytes under the
same name (create-only: 412). Late rows add parts numbered on, so the manifest written then lists
more parts and has a new name (``through-NNNN``): nothing is ever replaced, and the newest manifest
of a window is the complete one. The content is a pure function of the part ledger and of the
chain start recorded with the name's first send, so a re-send is byte-identical.

`verify` reads them (`verify.manifests`) to prove completeness from the bucket alone, and a loader
can load by manifest instead of by listing (docs/customers.md).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa

from seqexport_dagster.contract.keys import MANIFEST_FORMAT, manifest_key
from seqexport_dagster.contract.window import Window, iso_ms
from seqexport_dagster.destination import PutOutcome
from seqexport_dagster.store import COMMITTED, PART_LANDED, SUCCESS_MARK, ControlPlane, PartRecord
from seqexport_dagster.store.prepared import Prepared, scalar
from seqexport_dagster.store.tables import parts as part_rows
from seqexport_dagster.store.tables import windows

FORMAT: Final = MANIFEST_FORMAT


@dataclass(frozen=True, slots=True)
class ManifestPart:
    key: str
    part: int
    rows: int
    bytes: int
    md5: str | None  # hex; None for parts written before the part ledger kept MD5s


def md5_hex(content_md5: str | None) -> str | None:
    """The ledger's base64 ``Content-MD5`` as hex (what S3 shows as the ETag of a single PUT)."""
    return None if content_md5 is None else base64.b64decode(content_md5).hex()


def manifest_parts(ledger: list[PartRecord]) -> list[ManifestPart]:
    """The landed data parts of a window, by number (a snapshot's ``_SUCCESS`` mark left out)."""
    landed = sorted((p for p in ledger if p.landed and p.kind != SUCCESS_MARK), key=lambda p: p.number)
    return [ManifestPart(p.key, p.number, p.rows, p.size, md5_hex(p.md5)) for p in landed]


def continues(parts: list[ManifestPart]) -> bool:
    """Whether the window's parts here continue a window delivered at an earlier place (a move):
    its first part here is not ``0000``."""
    return bool(parts) and parts[0].part > 0


def manifest_body(dataset: str, window: Window, chain_from_ms: int, parts: list[ManifestPart]) -> bytes:
    document: dict[str, Any] = {
        "format": FORMAT,
        "dataset": dataset,
        "date": window.date_key,
        "window": {
            "from_ms": window.from_ms,
            "to_ms": window.to_ms,
            "from": iso_ms(window.from_ms),
            "to": iso_ms(window.to_ms),
        },
        "chain_from_ms": chain_from_ms,
        "continues": continues(parts),
        "rows": sum(p.rows for p in parts),
        "bytes": sum(p.bytes for p in parts),
        "parts": [{"key": p.key, "part": p.part, "rows": p.rows, "bytes": p.bytes, "md5": p.md5} for p in parts],
    }
    return (json.dumps(document, indent=1) + "\n").encode()


def _chain_start() -> sa.Select[Any]:
    """`chain_start`'s query, built once (it runs for every manifest, and building a statement and
    its cache key costs more Python than SQLite takes to run it)."""
    w, p = windows, part_rows
    first_part_here = (
        sa.select(p.c.id)
        .where(
            p.c.export_id == w.c.export_id,
            p.c.dataset == w.c.dataset,
            p.c.from_ms == w.c.from_ms,
            p.c.to_ms == w.c.to_ms,
            p.c.location == w.c.location,
            p.c.part == 0,
            p.c.status == PART_LANDED,
        )
        .exists()
    )
    # The first in from_ms order along ix_windows_export_dataset_from, not a min() over every
    # window: the scan stops at the first own window (one per manifest written).
    return (
        sa.select(w.c.from_ms)
        .where(
            w.c.export_id == sa.bindparam("b_export_id"),
            w.c.dataset == sa.bindparam("b_dataset"),
            w.c.location == sa.bindparam("b_location"),
            w.c.status == COMMITTED,
            first_part_here,
        )
        .order_by(w.c.from_ms)
        .limit(1)
    )


_CHAIN_START: Final = Prepared(_chain_start())


def chain_start(store: ControlPlane, export_id: str, dataset: str, location: str, window: Window, *, own: bool) -> int:
    """Where the chain of windows delivered at this location as its own starts: its first committed
    window with a landed part ``0000`` here, or this window if it is earlier and ``own``. A manifest
    carries it so `verify` sees a first window that is missing altogether.

    Windows that only continue here, with late rows, a window delivered at an earlier location have
    no part ``0000`` here and are left out: they end before this location's own chain starts, and
    counting them made the start that of the earliest late row's window (issue 47). A continuing
    window written before any window of this location's own carries its own end, the earliest the
    own chain can start (the position had passed it at the move)."""
    with store.engine.connect() as conn:
        params = {"b_export_id": export_id, "b_dataset": dataset, "b_location": location}
        first = scalar(conn, _CHAIN_START, params)
    if own:
        return window.from_ms if first is None else min(int(first), window.from_ms)
    return window.to_ms if first is None else int(first)


def write_manifest(
    store: ControlPlane,
    put: Callable[[str, bytes, bool], PutOutcome],
    *,
    window_id: int,
    export_id: str,
    prefix: str,
    location: str,
    dataset: str,
    window: Window,
    replace: bool = False,
) -> tuple[str, PutOutcome] | None:
    """Write the window's manifest from the part ledger, create-only (an operator's replace may
    overwrite); None when the window has no landed part. ``put(key, body, replace)`` is the attempt's
    write (`attempt.Attempt`): its guard before the file, and its answer to a 403 on a store that may
    not overwrite (a probe tells "revoked" from "already there": a manifest re-sent after a lost answer
    or a retried commit is the same bytes under the same name).

    The chain start is where the chain stands when the name is first sent; a backfill may commit
    an earlier window before a re-send, so a re-send carries the start recorded with the first
    (`ControlPlane.manifest_chain`), and an operator's replace, which overwrites, the start of now."""
    parts = manifest_parts(store.window_parts(export_id, dataset, window, location, ids=False))
    if not parts:
        return None
    through = parts[-1].part
    key = manifest_key(prefix, dataset, window, through)
    chain_from_ms = None if replace else store.manifest_chain(window_id, through)
    if chain_from_ms is None:
        chain_from_ms = chain_start(store, export_id, dataset, location, window, own=not continues(parts))
    store.record_manifest_chain(window_id, through, chain_from_ms)
    body = manifest_body(dataset, window, chain_from_ms, parts)
    return key, put(key, body, replace)
