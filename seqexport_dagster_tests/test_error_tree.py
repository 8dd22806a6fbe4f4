"""The error tree has one home (`errors.py`) and the CLI maps it to exit codes by type, in one table."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import seqexport_dagster
from seqexport_dagster import errors
from seqexport_dagster.cli.exits import (
    ERROR_EXITS,
    EXIT_BAD_INPUT,
    EXIT_CONFLICT,
    EXIT_CONNECTION,
    EXIT_INTERNAL,
    EXIT_NOT_FOUND,
    EXIT_RATE_LIMITED,
    EXIT_UNAVAILABLE,
    error_field,
    exit_for,
)

PACKAGE = Path(seqexport_dagster.__file__).parent
ERROR_NAMES = {
    name for name, value in vars(errors).items() if inspect.isclass(value) and issubclass(value, BaseException)
} | {"Exception", "BaseException"}


def test_every_public_error_class_is_defined_in_errors_py() -> None:
    """A private control-flow exception (leading underscore) may live where it is raised and caught."""
    elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                if bases & ERROR_NAMES:
                    elsewhere.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
    assert elsewhere == []


def test_the_exit_table_lists_the_most_specific_type_first() -> None:
    """An entry after one of its base classes would never be reached."""
    types = [cls for cls, _, _ in ERROR_EXITS]
    for i, earlier in enumerate(types):
        for later in types[i + 1 :]:
            assert not issubclass(later, earlier), f"{later.__name__} is shadowed by {earlier.__name__}"
    assert types[-1] is errors.ExportError


@pytest.mark.parametrize(
    ("error", "kind", "code", "field"),
    [
        (errors.InvalidInput("bucket", "is empty"), "invalid_input", EXIT_BAD_INPUT, "bucket"),
        (errors.EndpointRefused("a private address"), "invalid_input", EXIT_BAD_INPUT, "endpoint"),
        (errors.NotFound("no such export"), "not_found", EXIT_NOT_FOUND, None),
        (errors.ConflictError("deleted"), "conflict", EXIT_CONFLICT, None),
        (
            errors.ConnectionTestFailed("s3://b", errors.EndpointUnreachable("no answer")),
            "connection_test_failed",
            EXIT_CONNECTION,
            None,
        ),
        (errors.RemoteConnectionTestFailed("refused"), "connection_test_failed", EXIT_CONNECTION, None),
        (errors.RateLimited("slow down", 1000), "rate_limited", EXIT_RATE_LIMITED, None),
        (errors.EndpointUnreachable("no answer"), "unavailable", EXIT_UNAVAILABLE, None),
        (errors.SecretKeyError("no keys"), "unavailable", EXIT_UNAVAILABLE, None),
        (errors.ConfigurationError("no control plane"), "unavailable", EXIT_UNAVAILABLE, None),
        (errors.AccessDenied("denied"), "error", EXIT_INTERNAL, None),
    ],
)
def test_each_error_ends_in_its_documented_exit_code(
    error: errors.ExportError, kind: str, code: int, field: str | None
) -> None:
    assert exit_for(error) == (kind, code)
    assert error_field(error) == field
