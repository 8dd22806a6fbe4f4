"""The Python API for managing exports: every operation of the customer docs, implemented once.

The dashboard calls this module; the `seqexport` CLI is a thin layer over it. Every method validates
all of its input before it changes anything, so a wrong value leaves the control plane untouched,
and raises only from our error tree (`seqexport_dagster.errors`):

- `InvalidInput`: a value is wrong; ``field`` names it and the message says what is accepted.
- `NotFound`: no such export.
- `ConflictError`: the operation does not apply in the export's current state (deleted, paused...).
- `ConnectionTestFailed`: the test write to the new destination failed; nothing was saved.
- `RateLimited`: the account ran too many connection tests lately (`store.rate_limit`); nothing
  was tested or saved; ``retry_after_ms`` says when it may try again.
- `SecretKeyError` / `ConfigurationError`: the operator's keys or settings are unusable.
- `RetryableError`: the control-plane database is briefly away.

No method ever returns or raises a secret: `ExportRecord` carries no secret, and errors from the
store are scrubbed of it where they are translated (`destination.s3`).

This module is the public surface; the rules live behind it: `validation` (the input rules, shared
with the remote CLI), `status` (what status shows and what "export now" would write) and
`assembly` (opening the control plane from settings).

Size: about 430 lines, one method per operation of the customer docs with the docstring that
documents it; the rules stay behind it (`validation`, `status`, `role_setup`).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from seqexport_dagster.clock import wall_clock_ms
from seqexport_dagster.contract.file_format import DEFAULT_FORMAT, parse_format
from seqexport_dagster.contract.schema import DATASETS, EVENT_DATASETS, parse_datasets
from seqexport_dagster.contract.table_format import parse_table, require_parquet
from seqexport_dagster.contract.validation import validate_account, validate_export_id, validate_lag_ms
from seqexport_dagster.contract.window import (
    DAY_MS,
    DEFAULT_FREQUENCY,
    DEFAULT_LAG_MS,
    frequency_ms,
)
from seqexport_dagster.delivery.assembly import open_control_plane
from seqexport_dagster.delivery.connection_test import (
    ConnectionTestResult,
    DestinationFactory,
    run_connection_test,
)
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.destination import (
    DestinationConfig,
    OperatorPolicy,
    open_destination,
    validate_config,
    validate_provider,
)
from seqexport_dagster.destination.config import stand_in_secret
from seqexport_dagster.destination.role import RoleSetup
from seqexport_dagster.errors import ConfigurationError, ConflictError, InvalidInput
from seqexport_dagster.management.history import RunHistory
from seqexport_dagster.management.history import history as run_history
from seqexport_dagster.management.parameters import Progress, Secret, quiet
from seqexport_dagster.management.presentation import mask_key_id
from seqexport_dagster.management.role_setup import check_role, role_setup, take_role, with_role_change
from seqexport_dagster.management.status import (
    DatasetStatus,
    ExportNowPlan,
    ExportStatus,
    LastError,
    export_now_window,
    export_status,
    nothing_due_message,
)
from seqexport_dagster.progress import Advance, no_progress
from seqexport_dagster.store import (
    ACTIVE,
    DELETED,
    PAUSED,
    ControlPlane,
    ExportRecord,
    RotationReport,
    RunSummary,
)
from seqexport_dagster.store.rate_limit import admit_connection_test

if TYPE_CHECKING:
    from seqexport_dagster.management.webhooks_api import Webhooks

HISTORY_DAYS: Final = 14


class Exports:
    """Manage the exports stored in one control plane.

    ``clock`` returns epoch milliseconds; tests pass a settable one. ``destination_factory`` opens
    the destination for connection tests, as the runner does for exports.
    """

    def __init__(
        self,
        store: ControlPlane,
        policy: OperatorPolicy,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        destination_factory: DestinationFactory = open_destination,
    ) -> None:
        self.store = store
        self.policy = policy
        self.clock = clock
        self.destination_factory = destination_factory

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        clock: Callable[[], int] = wall_clock_ms,
        migrate: bool = True,
        must_exist: bool = False,
    ) -> Exports:
        """Open the control plane named by ``settings`` (`assembly.open_control_plane`); migrates it to
        the current schema first.

        ``must_exist`` refuses (`ConfigurationError`) a control plane that was never created, so a
        mistyped ``SEQEXPORT_HOME`` or database URL is an error instead of a new, empty control plane.
        """
        return cls(open_control_plane(settings, must_exist=must_exist, migrate=migrate), settings.policy, clock=clock)

    def close(self) -> None:
        self.store.engine.dispose()

    def create(
        self,
        *,
        account_id: str,
        provider: str,
        bucket: str,
        datasets: Iterable[str] | str,
        prefix: str = "",
        region: str | None = None,
        endpoint: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: Secret = None,
        frequency: str = DEFAULT_FREQUENCY,
        lag_ms: int = DEFAULT_LAG_MS,
        sse: str | None = None,
        kms_key_id: str | None = None,
        role_arn: str | None = None,
        external_id: str | None = None,
        progress: Progress = quiet,
        file_format: str = DEFAULT_FORMAT,
        table: str | None = None,
    ) -> ExportRecord:
        """Create an export: validate everything, write the connection test file, then save.

        ``table`` (``delta``, with ``file_format="parquet"``) keeps a Delta Lake log per dataset
        beside the parts (`delivery.table`).

        ``sse`` is ``AES256`` or ``aws:kms`` (with ``kms_key_id``), sent on every PutObject; left out,
        the bucket's default encryption applies. ``role_arn`` (Amazon S3) replaces the keys: the
        role is assumed with ``external_id``, which must come from `role_setup` for this account.

        ``secret_access_key`` may be a callable (a prompt): it is called only once every other value
        has passed validation, so nobody types a secret only to be told the bucket name is wrong.
        Raises `ConnectionTestFailed` (nothing saved) if the store refuses the test write.
        """
        validate_account(account_id)
        names = parse_datasets(datasets if isinstance(datasets, str) else tuple(datasets))
        frequency_ms(frequency)
        validate_lag_ms(lag_ms)
        fmt = parse_format(file_format)
        table_format = parse_table(table)
        require_parquet(table_format, fmt)
        unchecked = DestinationConfig(
            provider=validate_provider(provider, self.policy),
            bucket=bucket,
            prefix=prefix,
            region=region or None,
            endpoint=endpoint or None,
            access_key_id=access_key_id or None,
            sse=sse or None,
            kms_key_id=kms_key_id or None,
            role_arn=role_arn or None,
            external_id=external_id or None,
        )
        config = self._with_secret(unchecked, secret_access_key)
        check_role(self.store.engine, self.policy, account_id, config)
        self._test(account_id, config, progress)
        record = self.store.create_export(
            account_id=account_id,
            destination=config,
            datasets=names,
            frequency=frequency,
            lag_ms=lag_ms,
            now_ms=self.clock(),
            file_format=fmt,
            table=table_format,
        )
        take_role(self.store.engine, account_id, config, record.id)
        progress(f"saved export {record.id}")
        return record

    def role_setup(self, account_id: str) -> RoleSetup:
        """A new external id for a role export of ``account_id``, with the trust policy to paste."""
        return role_setup(self.store.engine, self.policy, account_id, self.clock())

    def _with_secret(self, config: DestinationConfig, secret: Secret) -> DestinationConfig:
        """Validate ``config``, ask for the secret only then, and validate with it."""
        if config.role_arn or config.external_id:
            # A role has no secret to ask for; one given anyway is refused as "not both".
            return validate_config(replace(config, secret_access_key=None if callable(secret) else secret), self.policy)
        if config.provider != "local" and callable(secret):
            # A stand-in lets validate_config check everything but the secret before we ask for it.
            stand_in = config.secret_access_key or stand_in_secret(config.provider)
            validate_config(replace(config, secret_access_key=stand_in), self.policy)
        value = secret() if callable(secret) else secret
        return validate_config(replace(config, secret_access_key=value or config.secret_access_key), self.policy)

    def _test(self, account_id: str, config: DestinationConfig, progress: Progress) -> ConnectionTestResult:
        admit_connection_test(self.store.engine, account_id, self.clock())
        progress(f"testing the connection: writing a test file to {config.describe()}/_sequenzy/ ...")
        result = run_connection_test(
            config, self.policy, now_ms=self.clock(), destination_factory=self.destination_factory
        )
        progress(f"connection test passed in {result.elapsed_ms} ms: wrote {result.key}")
        return result

    def get(self, export_id: str) -> ExportRecord:
        """One export, deleted ones included (their history stays readable)."""
        return self.store.get_export(validate_export_id(export_id))

    def list(self, *, account_id: str | None = None, include_deleted: bool = False) -> builtins.list[ExportRecord]:
        if account_id is not None:
            validate_account(account_id)
        return self.store.list_exports(account_id=account_id, include_deleted=include_deleted)

    def status(self, export_id: str) -> ExportStatus:
        """State, each dataset's position and lag behind real time, and the last errors."""
        return self.status_of(self.get(export_id))

    def status_of(self, record: ExportRecord) -> ExportStatus:
        """`status` of a record already read (the HTTP API reads it once, to check the account)."""
        return export_status(record, self.clock())

    def _live(self, export_id: str, action: str) -> ExportRecord:
        record = self.get(export_id)
        if record.status == DELETED:
            raise ConflictError(f"export {record.id} is deleted; {action} is not possible (create a new export)")
        return record

    def pause(self, export_id: str) -> ExportRecord:
        """Stop exporting; the position is kept. A run in progress stops before its next file."""
        record = self._live(export_id, "pause")
        if record.status == PAUSED:
            return record
        return self.store.set_status(record.id, PAUSED, self.clock())

    def resume(self, export_id: str) -> ExportRecord:
        """Continue from the kept position: the backlog is caught up with no gap."""
        record = self._live(export_id, "resume")
        if record.status == ACTIVE:
            return record
        return self.store.set_status(record.id, ACTIVE, self.clock())

    def add_datasets(self, export_id: str, datasets: Iterable[str] | str) -> ExportRecord:
        """Add datasets; each starts from now (a re-added one starts anew, not where it stopped)."""
        names = parse_datasets(datasets if isinstance(datasets, str) else tuple(datasets))
        record = self._live(export_id, "changing datasets")
        present = [n for n in names if record.dataset_state(n) is not None]
        if present:
            raise ConflictError(f"export {record.id} already exports {', '.join(present)}")
        now = self.clock()
        for name in names:
            record = self.store.add_dataset(record.id, name, now)
        return record

    def remove_datasets(self, export_id: str, datasets: Iterable[str] | str) -> ExportRecord:
        """Stop exporting datasets. Their files stay in the bucket."""
        names = parse_datasets(datasets if isinstance(datasets, str) else tuple(datasets))
        record = self._live(export_id, "changing datasets")
        absent = [n for n in names if record.dataset_state(n) is None]
        if absent:
            raise ConflictError(f"export {record.id} does not export {', '.join(absent)}")
        if len(record.datasets) == len(names):
            raise ConflictError(
                f"export {record.id} would have no dataset left; keep at least one, or delete the export"
            )
        now = self.clock()
        for name in names:
            record = self.store.remove_dataset(record.id, name, now)
        return record

    def change_destination(
        self,
        export_id: str,
        *,
        provider: str | None = None,
        bucket: str | None = None,
        prefix: str | None = None,
        region: str | None = None,
        endpoint: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: Secret = None,
        sse: str | None = None,
        kms_key_id: str | None = None,
        role_arn: str | None = None,
        external_id: str | None = None,
        progress: Progress = quiet,
    ) -> ExportRecord:
        """Move the export (bucket, prefix, endpoint), rotate its keys or change its encryption.

        ``role_arn`` moves it onto a role (``""`` drops the role; a new access key replaces it).

        ``None`` keeps a value; ``""`` clears prefix, region, endpoint or sse. A new access key id or
        provider needs its secret too (a callable is asked only after validation, as in `create`).
        The test file is written at the new destination first;
        only then is the change saved. A running export picks it up before its next file, starts
        the current window (or subscriber snapshot) over there and continues from its position.
        """
        record = self._live(export_id, "changing the destination")
        given = (
            provider,
            bucket,
            prefix,
            region,
            endpoint,
            access_key_id,
            secret_access_key,
            sse,
            kms_key_id,
            role_arn,
        )
        if all(v is None for v in given):
            raise InvalidInput(
                "destination",
                "nothing to change: give a new provider, bucket, prefix, region, endpoint, key or encryption",
            )
        current, _ = self.store.destination_config(record.id)
        new_provider = validate_provider(provider, self.policy) if provider is not None else current.provider
        new_key = (
            access_key_id is not None and access_key_id != current.access_key_id
        ) or new_provider != current.provider
        if new_key and secret_access_key is None and new_provider != "local" and not role_arn:
            raise InvalidInput(
                "secret_access_key", "a new access key id or provider needs its secret (prompt, stdin or environment)"
            )
        changed = replace(
            current,
            provider=new_provider,
            bucket=current.bucket if bucket is None else bucket,
            prefix=current.prefix if prefix is None else prefix,
            region=current.region if region is None else (region or None),
            endpoint=current.endpoint if endpoint is None else (endpoint or None),
            access_key_id=current.access_key_id if access_key_id is None else (access_key_id or None),
            # The old secret never goes with a new key: it would only produce a bad-signature error.
            secret_access_key=None if new_key else current.secret_access_key,
            sse=current.sse if sse is None else (sse or None),
            # A new sse other than aws:kms drops the old key id; a new key id alone keeps sse.
            kms_key_id=(
                (kms_key_id or None)
                if kms_key_id is not None
                else (current.kms_key_id if sse is None or sse == "aws:kms" else None)
            ),
        )
        if new_provider != current.provider:
            # Neither the endpoint nor the region of the old provider follows a change of provider:
            # gcs's fixed endpoint must not follow a move back to s3, and an s3 region means nothing to gcs.
            if endpoint is None:
                changed = replace(changed, endpoint=None)
            if region is None:
                changed = replace(changed, region=None)
        elif new_provider == "azure" and new_key and endpoint is None:
            # An Azure endpoint names its account: another account's follows the account, not the old one.
            changed = replace(changed, endpoint=None)
        changed = with_role_change(
            current, changed, role_arn=role_arn, external_id=external_id, new_key=bool(access_key_id)
        )
        config = self._with_secret(changed, secret_access_key)
        check_role(self.store.engine, self.policy, record.account_id, config, record.id)
        self._test(record.account_id, config, progress)
        updated = self.store.update_destination(record.id, config, self.clock())
        take_role(self.store.engine, record.account_id, config, record.id)
        progress(f"saved: export {updated.id} now writes to {config.describe()}")
        return updated

    def change_frequency(self, export_id: str, frequency: str) -> ExportRecord:
        """Change how often windows are written: ``15m``, ``1h``, ``6h`` or ``24h``.

        The chain stays gap-free: every position is kept, and the next window of each dataset runs
        from its position to the next point of the new grid (counted from UTC midnight), so a move
        from 15m to 1h at 13:15 writes (13:15, 14:00] next, then whole hours.
        """
        frequency_ms(frequency)
        record = self._live(export_id, "changing the frequency")
        if record.frequency == frequency:
            return record
        return self.store.set_frequency(record.id, frequency, self.clock())

    def change_table(self, export_id: str, table: str | None) -> ExportRecord:
        """Keep a Delta Lake table per dataset (``delta``, Parquet exports only) or stop (``none``).

        On: each dataset's table takes the windows committed from now on (windows written before
        are not added). Off: the log stays as written; turned on again, the table continues it.
        """
        table_format = parse_table(table)
        record = self._live(export_id, "changing the table")
        require_parquet(table_format, record.format, changing="table", export_id=record.id)
        if record.table == table_format:
            return record
        return self.store.set_table(record.id, table_format, self.clock())

    def change_format(self, export_id: str, file_format: str) -> ExportRecord:
        """Change the file format of new windows: ``jsonl.gz`` or ``parquet``.

        It takes effect at the next window of each dataset (the next snapshot day): the chain stays
        gap-free, and a window already started, retried or receiving late rows keeps the format of the
        parts it has, so no window is ever split across formats.
        """
        fmt = parse_format(file_format)
        record = self._live(export_id, "changing the format")
        require_parquet(record.table, fmt, changing="format", export_id=record.id)
        if record.format == fmt:
            return record
        return self.store.set_format(record.id, fmt, self.clock())

    def export_now(self, export_id: str) -> ExportRecord:
        """Run at once instead of waiting for the schedule (and without any backoff wait).

        Raises `ConflictError` saying why and when instead of saving a request that would do
        nothing: the export is paused, or everything up to now − lag is already exported.
        """
        return self.export_now_plan(export_id).export

    def export_now_plan(self, export_id: str) -> ExportNowPlan:
        """`export_now`, plus what it will write first for each dataset (see `ExportNowPlan`)."""
        record = self._live(export_id, "export now")
        if record.status == PAUSED:
            raise ConflictError(
                f"export {record.id} is paused, so export now would run nothing; "
                f"resume it first (`seqexport resume {record.id}`), then it catches up from its position"
            )
        now = self.clock()
        due = tuple((state.dataset, w) for state in record.datasets if (w := export_now_window(record, state, now)))
        if not due:
            raise ConflictError(nothing_due_message(record, now))
        return ExportNowPlan(self.store.request_export_now(record.id, now), due)

    def history(self, export_id: str, *, days: int = 14) -> builtins.list[RunHistory]:
        """Every run of the last ``days`` (1 to 14) days, newest first: day, trigger, rows, files, size, error."""
        if not 1 <= days <= HISTORY_DAYS:
            raise InvalidInput("days", f"{days} is out of range: history keeps 1 to {HISTORY_DAYS} days")
        record = self.get(export_id)
        # History keeps 14 days back from the time it is given and has no upper bound, so moving
        # that time back by (14 - days) days narrows the history to the last ``days`` exactly.
        return run_history(self.store, record.id, self.clock() - (HISTORY_DAYS - days) * DAY_MS)

    def delete(self, export_id: str) -> ExportRecord:
        """Stop the export for good. Files stay in the bucket; the history stays readable."""
        record = self.get(export_id)
        if record.status == DELETED:
            raise ConflictError(
                f"export {record.id} is already deleted; nothing changed (its files stay in the bucket)"
            )
        return self.store.set_status(record.id, DELETED, self.clock())

    def webhooks(self) -> Webhooks:
        """The account webhooks of this control plane (`webhooks_api`), with the same clock and policy."""
        from seqexport_dagster.management.webhooks_api import Webhooks

        return Webhooks(self.store.engine, self.store.box, self.policy, clock=self.clock)

    def rotate_keys(self, progress: Advance = no_progress) -> RotationReport:
        """Re-seal every stored secret with the first key of SEQEXPORT_SECRET_KEYS (and the full
        destination binding), webhook signing secrets too; rows that do not open are reported and
        left as they are."""
        from seqexport_dagster.store.webhooks import WebhookStore

        report = self.store.rotate_secrets(lambda done, total: progress("secrets re-sealed", done, total))
        return WebhookStore(self.store.engine, self.store.box).rotate_secrets(report)


__all__ = [
    "ConfigurationError",
    "DATASETS",
    "EVENT_DATASETS",
    "DatasetStatus",
    "ExportRecord",
    "ExportNowPlan",
    "ExportStatus",
    "Exports",
    "LastError",
    "RunHistory",
    "RunSummary",
    "mask_key_id",
]
