"""How the tests and benchmarks are laid out: shared helpers live in ``seqexport_dagster_tests.support``.

A test module never imports another test module (importing one runs its module-level fixtures and
constants into the importer, and ties two tests together by accident), and a benchmark takes from
``seqexport_dagster_tests`` only what ``support`` offers. Imports are read with `ast`, including
imports inside functions and dotted module names given as strings (``python -m ...``).
"""

from __future__ import annotations

import re
from pathlib import Path

from seqexport_dagster_tests.support.imports import imported

ROOT = Path(__file__).resolve().parents[1]
TESTS = "seqexport_dagster_tests"
SUPPORT = f"{TESTS}.support"
#: A string constant that is a dotted module name of the tests package: a ``-m`` argument.
MODULE_STRING = re.compile(rf"{TESTS}(\.\w+)+")


def offences(root: Path) -> list[str]:
    found = []
    for folder in (TESTS, "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            for line, name in sorted(imported(root, path, MODULE_STRING)):
                parts = name.split(".")
                if parts[0] != TESTS:
                    continue
                if len(parts) > 1 and parts[1].startswith("test_"):
                    found.append(f"{where}:{line} imports the test module {'.'.join(parts[:2])}")
                elif folder == "benchmarks" and parts[:2] != SUPPORT.split("."):
                    found.append(f"{where}:{line} imports {name}, outside {SUPPORT}")
    return list(dict.fromkeys(found))  # one line per offence, however many names it imports


def test_no_test_module_imports_another_and_benchmarks_import_only_support() -> None:
    assert offences(ROOT) == []


def test_the_top_of_the_tests_package_holds_tests_only() -> None:
    """A shared helper belongs in support/, not next to the tests."""
    top = {p.name for p in (ROOT / TESTS).iterdir() if p.suffix == ".py" or (p.is_dir() and p.name != "__pycache__")}
    assert sorted(n for n in top if not n.startswith("test_") and n not in {"__init__.py", "conftest.py"}) == [
        "support"
    ]


def test_the_check_finds_the_layout_it_forbids(tmp_path: Path) -> None:
    """The old layout, in miniature: each way of breaking the rules is reported once."""
    tests, support, benchmarks = tmp_path / TESTS, tmp_path / TESTS / "support", tmp_path / "benchmarks"
    for folder in (tests, support, benchmarks):
        folder.mkdir()
        (folder / "__init__.py").write_text("")
    (support / "world.py").write_text("DAY0 = 0\n")
    (tests / "test_sensor.py").write_text("def bucket_rows(): ...\n")
    (tests / "test_assets.py").write_text(
        f"from {TESTS}.test_sensor import bucket_rows\n"
        f"from {TESTS}.support.world import DAY0\n"
        "def later():\n"
        f"    import {TESTS}.test_sensor\n"
        "from . import test_sensor\n"
        f"WORKER = ['python', '-m', '{TESTS}.test_sensor']\n"
    )
    (benchmarks / "soak.py").write_text(
        f"from {TESTS} import moto_server\n"
        f"from {TESTS}.support import world\n"
        f"from {TESTS}.support.world import DAY0\n"
        "def later():\n"
        f"    from {TESTS}.faults import proxy\n"
    )
    assert offences(tmp_path) == [
        f"{TESTS}/test_assets.py:1 imports the test module {TESTS}.test_sensor",
        f"{TESTS}/test_assets.py:4 imports the test module {TESTS}.test_sensor",
        f"{TESTS}/test_assets.py:5 imports the test module {TESTS}.test_sensor",
        f"{TESTS}/test_assets.py:6 imports the test module {TESTS}.test_sensor",
        f"benchmarks/soak.py:1 imports {TESTS}.moto_server, outside {SUPPORT}",
        f"benchmarks/soak.py:5 imports {TESTS}.faults.proxy, outside {SUPPORT}",
    ]
