"""What a source file imports, read with `ast` without running it: the structure tests' one walker."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    """``root/a/b/c.py`` is ``a.b.c``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package(root: Path, path: Path) -> list[str]:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts if path.name == "__init__.py" else parts[:-1]


def _under_type_checking(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imported(root: Path, path: Path, strings: re.Pattern[str] | None = None) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything ``path`` imports at run time, lazy imports included.

    ``from m import x`` reads as ``m.x`` (a submodule or a name in ``m``), relative imports are
    resolved against ``root``, and ``if TYPE_CHECKING:`` blocks are left out: they never run. With
    ``strings``, a string constant matching it counts too (a module named for ``python -m``).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and _under_type_checking(node, parents):
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = _package(root, path)
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, *([base] if base else [])])
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"
        elif (
            strings and isinstance(node, ast.Constant) and isinstance(node.value, str) and strings.fullmatch(node.value)
        ):
            yield node.lineno, node.value
