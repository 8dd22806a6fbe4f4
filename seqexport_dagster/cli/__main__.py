"""``python -m seqexport_dagster.cli``: the same as the `seqexport` console script."""

from __future__ import annotations

from seqexport_dagster.cli import main

raise SystemExit(main())
