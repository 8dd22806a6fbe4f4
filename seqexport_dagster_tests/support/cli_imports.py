"""`seqexport` in a subprocess of its own: its output, and every module the process had loaded at exit.

``python -m seqexport_dagster_tests.support.cli_imports OUT ARGS...`` runs the CLI's `main` with ARGS,
as the console script does, and writes the names in `sys.modules` as it exits to the file OUT, one
a line. That is what the process loaded, lazy imports inside the command included, whichever way
they were imported (``python -X importtime`` misses modules loaded through `importlib.import_module`).
This module imports nothing of the package before the CLI does.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ImportedRun:
    code: int
    out: str
    err: str
    modules: frozenset[str]

    def loaded(self, *roots: str) -> list[str]:
        """The loaded modules that are one of ``roots`` or inside one."""
        return sorted(m for m in self.modules if any(m == r or m.startswith(r + ".") for r in roots))


def run_importing(argv: Sequence[str], env: Mapping[str, str], folder: Path, *, timeout: float = 120) -> ImportedRun:
    """The CLI with ``argv`` in the test's environment (no SEQEXPORT_ variables) plus ``env``; stdin
    empty, as in a script. The module list is written under ``folder``."""
    import os
    import subprocess
    import tempfile

    from seqexport_dagster_tests.support.processes import ROOT, run_in_group

    base = {k: v for k, v in os.environ.items() if not k.startswith("SEQEXPORT_")}
    base["PYTHONPATH"] = str(ROOT)
    with tempfile.NamedTemporaryFile("r", dir=folder, suffix=".modules") as listing:
        command = [sys.executable, "-m", "seqexport_dagster_tests.support.cli_imports", listing.name, *argv]
        done = run_in_group(command, timeout=timeout, env={**base, **env}, stdin=subprocess.DEVNULL)
        modules = frozenset(Path(listing.name).read_text().split())
    return ImportedRun(done.returncode, done.stdout, done.stderr, modules)


def main(argv: list[str]) -> int:
    listing, args = Path(argv[0]), argv[1:]
    from seqexport_dagster.cli import main as cli_main

    try:
        return cli_main(args)
    finally:
        listing.write_text("\n".join(sorted(sys.modules)) + "\n")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
