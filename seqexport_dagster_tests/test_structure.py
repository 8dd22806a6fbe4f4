"""The architecture, checked: imports walked with `ast`, no module run.

- no import cycle inside ``seqexport_dagster`` (a circle means two modules own one concept);
- Dagster is imported only by the wiring: ``defs/`` and ``definitions.py``, and ``demo/``, which runs
  the scheduler sensor and the runs in-process to show what an operator sees; the core is plain Python;
- the core never imports the wiring; only the CLI, a front end, reaches into it (the demo, and the
  daemon check behind `export-now`), and only lazily;
- no product module grows past about 400 lines without saying why at its top (``Size: <reason>``).
- the layers point one way: a module imports its own layer and the layers below it, never one above
  (`LAYERS`, from the top), and every module has its layer;

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

#: The layers, from the top, each with the module trees it holds. A module may import its own layer
#: and every layer below it, never one above: the contract (what a customer's files promise) knows
#: nothing of buckets, a destination nothing of the control plane, the control plane nothing of the
#: delivery that drives it, delivery nothing of the management and front ends that call it. The shared
#: modules (every error class, the clock, progress) sit below all and import no other layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("front end", (f"{PACKAGE}.cli", f"{PACKAGE}.service", f"{PACKAGE}.defs", f"{PACKAGE}.demo", f"{PACKAGE}.definitions")),
    ("management", (f"{PACKAGE}.management",)),
    ("delivery", (f"{PACKAGE}.delivery",)),
    ("control plane and source", (f"{PACKAGE}.store", f"{PACKAGE}.source")),
    ("destination", (f"{PACKAGE}.destination",)),
    ("contract", (f"{PACKAGE}.contract",)),
    ("shared", (f"{PACKAGE}.errors", f"{PACKAGE}.clock", f"{PACKAGE}.progress")),
)  # fmt: skip


def is_under(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == root or name.startswith(root + ".") for root in roots)


def modules(package: str, root: Path = ROOT) -> dict[str, Path]:
    return {module_name(root, p): p for p in sorted((root / package).rglob("*.py"))}


def imports_of(path: Path, root: Path = ROOT) -> set[str]:
    return {name for _, name in imported(root, path)}


def owner(name: str, known: dict[str, Path]) -> str | None:
    """The module an imported name lives in: ``a.b.X`` is ``a.b`` when ``a.b`` is a module."""
    parts = name.split(".")
    while parts and ".".join(parts) not in known:
        parts.pop()
    return ".".join(parts) or None


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Who imports whom. A module's own parent packages are left out: Python has initialised them
    before the module runs, so ``from seqexport_dagster.cli import render`` inside ``cli/`` depends on
    ``cli.render``, not on ``cli/__init__``."""
    known = modules(package, root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        targets = {owner(m, known) for m in imports_of(path, root)}
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


def layer_of(name: str, layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> int | None:
    """The index of the layer ``name`` belongs to (0 is the top), or None. The package itself (its
    ``__init__``, which imports nothing) counts with the shared modules."""
    if name == PACKAGE:
        return len(layers) - 1
    found = [i for i, (_, roots) in enumerate(layers) if is_under(name, roots)]
    return found[0] if found else None


def upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    """Every import that points up the layers (or out of them), one line each, sorted."""
    found = []
    for name in sorted(graph):
        here = layer_of(name, layers)
        if here is None:
            continue  # reported by `unplaced`
        for target in sorted(graph[name]):
            there = layer_of(target, layers)
            if there is not None and there < here:
                found.append(f"{name} ({layers[here][0]}) imports {target} ({layers[there][0]})")
    return found


def unplaced(graph: dict[str, set[str]], layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS) -> list[str]:
    return sorted(name for name in graph if layer_of(name, layers) is None)


def test_every_module_has_its_layer() -> None:
    assert unplaced(import_graph(PACKAGE)) == [], "modules in no layer: add them to a layer's package"


def test_no_module_imports_a_layer_above_its_own() -> None:
    offenders = upward_imports(import_graph(PACKAGE))
    assert not offenders, (
        "imports against the layers (a module may import its own layer and those below):\n" + "\n".join(offenders)
    )


def test_the_layer_rules_see_a_planted_offender_each(tmp_path: Path) -> None:
    """A package in miniature, one module per layer, each importing every layer above it (every other
    import lazily, inside a function): each rule reports each of its offenders, and nothing else is
    reported. A module outside every layer, as a new module left at the package root would be, is
    reported too."""
    first = [roots[0] for _, roots in LAYERS]
    for index, module in enumerate(first):
        path = tmp_path / (module.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(
            f"def later_{above}():\n    import {first[above]}\n" if above % 2 else f"import {first[above]}\n"
            for above in range(index)
        ))  # fmt: skip
    graph = import_graph(PACKAGE, tmp_path)
    assert unplaced(graph) == []
    assert upward_imports(graph) == sorted(
        f"{first[i]} ({LAYERS[i][0]}) imports {first[j]} ({LAYERS[j][0]})" for i in range(len(first)) for j in range(i)
    )
    assert len(upward_imports(graph)) == len(LAYERS) * (len(LAYERS) - 1) // 2
    (tmp_path / PACKAGE / "stray.py").write_text("")
    assert unplaced(import_graph(PACKAGE, tmp_path)) == [f"{PACKAGE}.stray"]


def root_entries(root: Path = ROOT) -> set[str]:
    """The modules and packages at the top of the package: ``errors.py`` gives ``errors``."""
    found = set()
    for path in (root / PACKAGE).iterdir():
        if path.suffix == ".py" and path.stem != "__init__":
            found.add(path.stem)
        elif path.is_dir() and (path / "__init__.py").exists():
            found.add(path.name)
    return found


def test_the_package_root_shows_the_layers() -> None:
    """At the root: the shared modules, the entry point and one package per layer's part, nothing else
    (a newcomer reads the architecture from the folders). Each entry is a root of `LAYERS`."""
    roots = {name.removeprefix(PACKAGE + ".") for _, names in LAYERS for name in names}
    assert root_entries() == roots


def test_the_root_rule_sees_a_stray_module(tmp_path: Path) -> None:
    (tmp_path / PACKAGE / "contract").mkdir(parents=True)
    for name in ("__init__.py", "errors.py", "contract/__init__.py", "runner.py"):
        (tmp_path / PACKAGE / name).write_text("")
    (tmp_path / PACKAGE / "schemas").mkdir()  # data, not a package
    assert root_entries(tmp_path) == {"errors", "contract", "runner"}


def test_the_layers_allow_imports_down_and_within() -> None:
    """Guards the rule against refusing everything: from the top to the bottom, and inside one layer."""
    top, shared = LAYERS[0][1], LAYERS[-1][1]
    runner, planner = (f"{LAYERS[2][1][0]}.{name}" for name in ("runner", "planner"))
    graph = {top[0]: {shared[0], runner}, runner: {planner, shared[0]}, shared[0]: {shared[1]}}
    assert upward_imports(graph) == []
