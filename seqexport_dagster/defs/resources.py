"""Resources: the control plane, the source database, operator settings and the clock.

Each field is configured through `dg.EnvVar` in `definitions.py`. A resource turns its fields into
`Settings` with `Settings.from_fields` when it is used (never at import): an empty field leaves its
variable (or the default decided in `seqexport_dagster.delivery.settings`) in force, so a laptop needs no variables.
The parts are opened at the one assembly point, `seqexport_dagster.delivery.assembly`.
Secrets (``SEQEXPORT_SECRET_KEYS``) reach Dagster only as the *name* of an environment variable:
run config and the job snapshot store ``{"env": ...}``, never the value.

The clock is swappable (`FixedClock`): tests and the demo pin time by swapping the resource.
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import sqlalchemy as sa
from pydantic import PrivateAttr

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.contract.window import HOUR_MS
from seqexport_dagster.delivery.assembly import open_control_plane, open_runner, open_source, shown_url
from seqexport_dagster.delivery.batch import BatchRunner
from seqexport_dagster.delivery.runner import Runner
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.destination import OperatorPolicy
from seqexport_dagster.source.reader import SourceReader
from seqexport_dagster.store import ControlPlane
from seqexport_dagster.store.crypto import SecretBox
from seqexport_dagster.store.database import create_engine
from seqexport_dagster.store.lease import Leases


class ClockResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # generic only for its own factories
    """Wall-clock time in epoch milliseconds."""

    def now_ms(self) -> int:
        return wall_clock_ms()


class FixedClock(ClockResource):
    """A pinned clock for tests and the demo's simulated day."""

    at_ms: int

    def now_ms(self) -> int:
        return self.at_ms


class _EngineResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # generic only for its own factories
    """Owns one engine per run or sensor tick; disposed when Dagster tears the resource down.

    Its repr and str never show a key or a database password: once Dagster has resolved the
    `dg.EnvVar` fields they hold the values, and a resource ends up in logs and error reports.
    """

    _engine: sa.Engine | None = PrivateAttr(default=None)

    def __repr_args__(self) -> Any:
        for name, value in super().__repr_args__():
            if name and "secret_keys" in name and value:
                yield name, "***"
            elif name and name.endswith("_url") and isinstance(value, str) and value:
                yield name, shown_url(value)
            else:
                yield name, value

    def _url(self) -> str:
        raise NotImplementedError

    def engine(self) -> sa.Engine:
        if self._engine is None:
            self._engine = create_engine(self._url())
        return self._engine

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.dispose()

    def dispose(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


class ControlPlaneResource(_EngineResource):
    """Exports, positions, the ledger and sealed credentials (``SEQEXPORT_DATABASE_URL``)."""

    database_url: str = ""
    secret_keys: str = ""
    #: A local key file (the demo's): its path may be stored by Dagster, its content never is.
    secret_key_file: str = ""

    def settings(self) -> Settings:
        return Settings.from_fields(
            {"database_url": self.database_url, "secret_keys": self.secret_keys}, secret_key_file=self.secret_key_file
        )

    def _url(self) -> str:
        return self.settings().database_url

    def box(self) -> SecretBox:
        return self.settings().secret_box()

    def store(self) -> ControlPlane:
        return open_control_plane(self.settings(), engine=self.engine())


class SourceResource(_EngineResource):
    """Sequenzy's event and subscriber tables, read-only (``SEQEXPORT_SOURCE_URL``)."""

    source_url: str = ""

    def settings(self) -> Settings:
        return Settings.from_fields({"source_url": self.source_url})

    def _url(self) -> str:
        return self.settings().source_url

    def reader(self) -> SourceReader:
        return open_source(self.settings(), engine=self.engine())


class OperatorResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # generic only for its own factories
    """Operator-level switches (``SEQEXPORT_ALLOW_LOCAL``, ``SEQEXPORT_RECONCILE_LOOKBACK_HOURS``).

    Never a customer's input.
    """

    allow_local: str = ""
    #: Rows that become visible up to this many hours after their ``recorded_at`` are repaired by the
    #: next scheduled run (`seqexport_dagster.delivery.reconcile`). Each run then recounts its dataset's windows
    #: of the last N h + 2 frequencies + lag, one count query per window. 0 disables the pass.
    reconcile_lookback_hours: int = 24

    def settings(self) -> Settings:
        return Settings.from_fields({"allow_local": self.allow_local})

    def policy(self) -> OperatorPolicy:
        return self.settings().policy

    def reconcile_lateness_ms(self) -> int:
        return max(self.reconcile_lookback_hours, 0) * HOUR_MS


class ExporterResource(dg.ConfigurableResource):  # type: ignore[type-arg]  # generic only for its own factories
    """Builds the core `Runner` from the other resources; the asset bodies only call this."""

    control_plane: ControlPlaneResource
    source: SourceResource
    operator: OperatorResource
    clock: ClockResource

    def batch(self, *, holder: str, **kwargs: Any) -> BatchRunner:
        """Many exports of one run, each under its writer lease (`seqexport_dagster.delivery.batch`)."""
        return BatchRunner(
            self.runner, self.control_plane.store(), self.leases(), holder=holder, clock=self.clock.now_ms, **kwargs
        )

    def leases(self) -> Leases:
        return Leases(self.control_plane.engine())

    def runner(self, **kwargs: Any) -> Runner:
        return open_runner(
            self.operator.settings(),
            store=self.control_plane.store(),
            source=self.source.reader(),
            clock=self.clock.now_ms,
            **kwargs,
        )
