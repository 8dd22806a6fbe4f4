"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from seqexport_dagster_tests.support import moto_server


@pytest.fixture(scope="session")
def moto() -> Iterator[moto_server.MotoServer]:
    """A permissive moto server (no auth) shared by the whole session; use unique bucket names."""
    server = moto_server.start(iam=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def iam_moto() -> Iterator[moto_server.MotoServer]:
    """A fresh moto server of your own: set it up with auth off, then call ``enforce_auth()``."""
    server = moto_server.start(iam=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def world(tmp_path):  # type: ignore[no-untyped-def]
    """Control plane + source on SQLite in tmp_path, a frozen clock at 2026-09-30T00:00Z."""
    from seqexport_dagster_tests.support.world import sqlite_world

    with sqlite_world(tmp_path) as w:
        yield w


@pytest.fixture
def pg_world(tmp_path):  # type: ignore[no-untyped-def]
    """The same world with both databases on the real PostgreSQL server (fresh databases)."""
    from seqexport_dagster_tests.support.world import postgres_world

    with postgres_world(tmp_path) as w:
        yield w
