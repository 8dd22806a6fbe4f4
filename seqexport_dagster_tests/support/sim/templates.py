"""Empty SQLite databases for new worlds: the control plane migrated and the source tables created
once per process, then copied (the migrations cost about a CPU-second per world, a large share of
a short seed). ``SEQEXPORT_SIM_TEMPLATES=0`` builds each world's databases anew (what the rate
benchmark compares against)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from seqexport_dagster.source.tables import create_source_tables
from seqexport_dagster.store import ControlPlane
from seqexport_dagster.store.crypto import SecretBox, new_key_spec
from seqexport_dagster.store.database import create_engine

TEMPLATES = os.environ.get("SEQEXPORT_SIM_TEMPLATES", "1") != "0"
_made: dict[str, Path] = {}


def template(which: str) -> Path:
    """The path of the empty ``control`` or ``source`` database of this process."""
    if which not in _made:
        path = Path(tempfile.mkdtemp(prefix="seqexport-sim-template-")) / f"{which}.db"
        engine = create_engine(f"sqlite:///{path}")
        try:
            if which == "control":
                ControlPlane(engine, SecretBox.parse(new_key_spec("template"))).migrate()
            else:
                create_source_tables(engine)
        finally:
            engine.dispose()
        _made[which] = path
    return _made[which]
