"""The architecture, checked: imports walked with `ast`, no module run.

- no import cycle inside ``seqexport_dagster`` (a circle means two modules own one concept);
- Dagster is imported only by the wiring: ``defs/`` and ``definitions.py``, and ``demo/``, which runs
  the scheduler sensor and the runs in-process to show what an operator sees; the core is plain Python;
- the core never imports the wiring; only the CLI, a front end, reaches into it (the demo, and the
  daemon check behind `export-now`), and only lazily;
- no product module grows past about 400 lines without saying why at its top (``Size: <reason>``).

That test modules never import each other lives in `test_structure_of_tests`.
"""

from __future__ import annotations

import re
from pathlib import Path

from seqexport_dagster_tests.support.imports import imported, module_name

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "seqexport_dagster"
MAX_LINES = 400
DAGSTER_PACKAGES = ("dagster", "dagster_aws", "dagster_gcp", "dagster_postgres", "dagster_webserver")
WIRING = (f"{PACKAGE}.definitions", f"{PACKAGE}.defs", f"{PACKAGE}.demo")
FRONT_ENDS = (f"{PACKAGE}.cli",)


def is_under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def modules(package: str) -> dict[str, Path]:
    return {module_name(ROOT, p): p for p in sorted((ROOT / package).rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    return {name for _, name in imported(ROOT, path)}


def owner(name: str, known: dict[str, Path]) -> str | None:
    """The module an imported name lives in: ``a.b.X`` is ``a.b`` when ``a.b`` is a module."""
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) or None


def import_graph(package: str) -> dict[str, set[str]]:
    """Who imports whom. A module's own parent packages are left out: Python has initialised them
    before the module runs, so ``from seqexport_dagster.cli import render`` inside ``cli/`` depends on
    ``cli.render``, not on ``cli/__init__``."""
    known = modules(package)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = {owner(m, known) for m in imports_of(path)}
        graph[name] = {m for m in targets if m and m != name and not name.startswith(m + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_cycle_finder_sees_a_circle_and_a_clean_graph() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_import_walker_resolves_relative_and_from_imports(tmp_path: Path) -> None:
    (tmp_path / "seqexport_dagster" / "pkg").mkdir(parents=True)
    source = tmp_path / "seqexport_dagster" / "pkg" / "m.py"
    source.write_text(
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\nimport os\n"
        "from . import sibling\nfrom .sub import thing\n"
        "if TYPE_CHECKING:\n    from seqexport_dagster import hidden\n"
        "def f():\n    from seqexport_dagster.lazy import x\n"
    )
    found = {name for _, name in imported(tmp_path, source)}
    assert {
        "os",
        "seqexport_dagster.pkg.sibling",
        "seqexport_dagster.pkg.sub.thing",
        "seqexport_dagster.lazy.x",
    } <= found
    assert not any("hidden" in m for m in found)


def test_no_import_cycle_in_the_package() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 40, "the walker found too few modules to mean anything"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_dagster_is_imported_only_by_the_wiring() -> None:
    offenders = []
    for name, path in modules(PACKAGE).items():
        dagster = sorted({m for m in imports_of(path) if m.split(".")[0] in DAGSTER_PACKAGES})
        if dagster and not is_under(name, WIRING):
            offenders.append(f"{name} imports {', '.join(dagster)}")
    assert not offenders, "the core must not import Dagster:\n" + "\n".join(offenders)


def test_the_wiring_does_import_dagster() -> None:
    """Guards the test above against a walker that finds nothing."""
    path = ROOT / PACKAGE / "definitions.py"
    assert "dagster" in {m.split(".")[0] for m in imports_of(path)}


def test_no_long_module_without_a_stated_reason() -> None:
    long = []
    for name, path in modules(PACKAGE).items():
        text = path.read_text()
        lines = text.count("\n")
        head = "\n".join(text.splitlines()[:40])
        if lines > MAX_LINES and not re.search(r"^(#\s*)?Size: \S", head, re.MULTILINE):
            long.append(f"{name}: {lines} lines")
    assert not long, f"modules over {MAX_LINES} lines with no 'Size: <reason>' at their top:\n" + "\n".join(long)


def test_the_core_never_imports_the_wiring() -> None:
    offenders = []
    for name, path in modules(PACKAGE).items():
        if is_under(name, WIRING + FRONT_ENDS):
            continue
        wiring = sorted({m for m in imports_of(path) if is_under(m, WIRING)})
        if wiring:
            offenders.append(f"{name} imports {', '.join(wiring)}")
    assert not offenders, "the core must not depend on the Dagster wiring or the demo:\n" + "\n".join(offenders)


def test_the_wiring_rule_sees_an_offender(tmp_path: Path) -> None:
    """Guards the rule above: a core module with a lazy import of the wiring is caught."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from seqexport_dagster.defs.resources import x\n")
    assert any(is_under(m, WIRING) for m in imports_of(source))
