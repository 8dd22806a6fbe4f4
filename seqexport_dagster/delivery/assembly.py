"""The one assembly point: the control plane, the source and the runner, opened from settings.

The API, the CLI, the demo, the Dagster resources, the test workers and the benchmarks open their
parts here instead of composing `ControlPlane`, `SourceReader` and `Runner` themselves, so how a
part is opened (which engine options, which key, which policy) is decided once.

What can go wrong, and where it surfaces:
- a URL that is no database URL, or names a missing driver: `ConfigurationError` naming the
  variable, never echoing the URL (it may hold a password);
- missing credential keys outside the local mode: `SecretKeyError` (`Settings.secret_box`), before
  anything is created or saved;
- ``must_exist`` and no control plane there: `ConfigurationError`, so a mistyped
  ``SEQEXPORT_HOME`` or database URL is an error instead of a new, empty control plane.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.errors import ConfigurationError
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store import ControlPlane
from seqexport_dagster.store.crypto import SecretBox
from seqexport_dagster.store.database import create_engine

if TYPE_CHECKING:
    # The runner pulls in the writer and the destinations; a CLI call that only reads the control
    # plane never needs them, so `open_runner` imports it when called.
    from seqexport_dagster.delivery.runner import Runner


def control_plane_at(url: str, secret_keys: str) -> ControlPlane:
    """The control plane at ``url`` sealed with ``secret_keys`` (``kid:base64``, comma-separated).

    For callers that hold the two values themselves (worker processes, benchmarks); everything
    configured by the environment goes through `open_control_plane`.
    """
    return ControlPlane(create_engine(url), SecretBox.parse(secret_keys))


def source_at(url: str, **kwargs: Any) -> SourceReader:
    """The source database at ``url``, read-only; ``kwargs`` go to `SourceReader` (batch size)."""
    return SourceReader(create_engine(url), **kwargs)


def open_control_plane(
    settings: Settings, *, engine: sa.Engine | None = None, must_exist: bool = False, migrate: bool = False
) -> ControlPlane:
    """The control plane named by ``settings``; ``engine`` reuses one its caller owns (a resource's).

    ``migrate`` brings it to the current schema first.
    """
    if engine is None:
        try:
            if must_exist:
                require_control_plane(settings)
            engine = create_engine(settings.database_url)
        except (sa.exc.ArgumentError, sa.exc.NoSuchModuleError, ImportError):
            # The URL may hold a database password: name the variable, never echo its value.
            raise ConfigurationError(
                "SEQEXPORT_DATABASE_URL is not a usable database URL (sqlite:///path or postgresql+psycopg2://...)"
            ) from None
    store = ControlPlane(engine, settings.secret_box())  # fails closed before anything is created or saved
    if migrate:
        store.migrate()
    return store


def open_source(settings: Settings, *, engine: sa.Engine | None = None, **kwargs: Any) -> SourceReader:
    """Sequenzy's source database named by ``settings``, read-only; ``kwargs`` go to `SourceReader`."""
    return SourceReader(engine, **kwargs) if engine is not None else source_at(settings.source_url, **kwargs)


def open_runner(
    settings: Settings,
    *,
    store: ControlPlane | None = None,
    source: SourceReader | None = None,
    clock: Callable[[], int] = wall_clock_ms,
    **kwargs: Any,
) -> Runner:
    """The runner over ``settings``' control plane, source and operator policy.

    ``store`` and ``source`` reuse parts already open (their engines stay the caller's to dispose);
    ``kwargs`` go to `Runner` (part limit, destination factory, lease hook...).
    """
    from seqexport_dagster.delivery.runner import Runner

    return Runner(
        store if store is not None else open_control_plane(settings),
        source if source is not None else open_source(settings),
        settings.policy,
        clock=clock,
        **kwargs,
    )


def shown_url(url: str) -> str:
    """The database URL with any password replaced by ``***``."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return "(not a database URL)"


def require_control_plane(settings: Settings) -> None:
    """Raise `ConfigurationError` unless ``settings`` names a control plane that `init` or `create` made.

    A SQLite file that does not exist is not opened (opening would create it); any other database
    must hold our tables.
    """
    url = sa.engine.make_url(settings.database_url)
    fix = (
        f"no control plane at {shown_url(settings.database_url)}: check {settings.database_url_from}, "
        "or create one with `seqexport init` (or `seqexport create`)"
    )
    if url.get_backend_name() == "sqlite":
        path = url.database or ""
        if path in ("", ":memory:") or not Path(path).is_file():
            raise ConfigurationError(fix)
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            present = sa.inspect(conn).has_table("exports")
    except (sa.exc.OperationalError, sa.exc.InterfaceError) as exc:
        first = (str(exc.orig or exc).strip().splitlines() or ["unknown error"])[0]
        raise ConfigurationError(
            f"control-plane database unavailable at {shown_url(settings.database_url)} ({first}); "
            f"check {settings.database_url_from}"
        ) from None
    finally:
        engine.dispose()
    if not present:
        raise ConfigurationError(fix)
