"""The remote CLI's `Exports`: the same methods, over the HTTP API with a token, instead of the database.

With ``SEQEXPORT_API_URL`` and ``SEQEXPORT_API_TOKEN`` set, `seqexport` builds a `RemoteExports`
and hands it to the same handlers as the local `api.Exports`. Answers come back as the
`presentation` shapes and are turned back into records, so the CLI prints them with the same code;
HTTP errors come back as the same error classes, so they leave with the same exit codes (`api_client`,
which `remote_webhooks` shares). What can
be checked without the server (names, datasets, frequency, lag, bucket rules) is checked here
first, so a secret is asked for only once the rest is right, as in the local CLI.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from seqexport_dagster.contract.file_format import DEFAULT_FORMAT, parse_format
from seqexport_dagster.contract.schema import parse_datasets
from seqexport_dagster.contract.table_format import parse_table, require_parquet
from seqexport_dagster.contract.validation import validate_account, validate_export_id, validate_lag_ms
from seqexport_dagster.contract.window import DEFAULT_FREQUENCY, DEFAULT_LAG_MS, Window, frequency_ms
from seqexport_dagster.destination import DestinationConfig, OperatorPolicy, validate_config, validate_provider
from seqexport_dagster.destination.config import stand_in_secret
from seqexport_dagster.destination.role import RoleSetup
from seqexport_dagster.errors import InvalidInput, NotFound
from seqexport_dagster.management import presentation as shapes
from seqexport_dagster.management.api_client import MAX_ANSWER_BYTES, ApiClient, api_url
from seqexport_dagster.management.history import RunHistory
from seqexport_dagster.management.parameters import Progress, Secret, quiet
from seqexport_dagster.management.remote_webhooks import RemoteWebhooks
from seqexport_dagster.management.status import ExportStatus
from seqexport_dagster.store import COMMITTED, ExportRecord, LedgerWindow, RotationReport

#: What the client checks before sending: the server's own policy may be stricter, never looser.
_LENIENT: Final = OperatorPolicy(allow_local=True)


class RemoteExports:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        self.api = ApiClient(url, token, max_answer_bytes=max_answer_bytes)
        self.url = self.api.url

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RemoteExports:
        url, token = env.get("SEQEXPORT_API_URL", ""), env.get("SEQEXPORT_API_TOKEN", "")
        url = api_url(url)
        if not token:
            raise InvalidInput("SEQEXPORT_API_TOKEN", "is required with SEQEXPORT_API_URL (ask your operator)")
        return cls(url, token)

    def close(self) -> None:
        self.api.close()

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
        validate_account(account_id)
        names = parse_datasets(datasets if isinstance(datasets, str) else tuple(datasets))
        frequency_ms(frequency)
        validate_lag_ms(lag_ms)
        table_format = parse_table(table)
        require_parquet(table_format, parse_format(file_format))
        config = DestinationConfig(
            provider=validate_provider(provider, _LENIENT),
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
        if role_arn or external_id:
            validate_config(config, _LENIENT)
            secret = None
        else:
            if provider != "local":
                validate_config(replace(config, secret_access_key=stand_in_secret(config.provider)), _LENIENT)
            secret = secret_access_key() if callable(secret_access_key) else secret_access_key
        progress(
            f"testing the connection: the API at {self.url} writes a test file to {config.describe()}/_sequenzy/ ..."
        )
        body = {
            "account_id": account_id,
            "provider": provider,
            "bucket": bucket,
            "prefix": prefix,
            "region": region or None,
            "endpoint": endpoint or None,
            "access_key_id": access_key_id or None,
            "secret_access_key": secret or None,
            "datasets": list(names),
            "frequency": frequency,
            "lag_ms": lag_ms,
            "sse": sse or None,
            "kms_key_id": kms_key_id or None,
            "role_arn": role_arn or None,
            "external_id": external_id or None,
            "format": file_format,
            # Sent only when asked for: a server from before the table setting refuses the field.
            **({"table": table_format} if table_format else {}),
        }
        record = shapes.export_from_json(self.api.call("POST", "/v1/exports", json=body))
        # Said after the answer: an error must stay the only line, as in the local CLI.
        progress(f"connection test passed: the API wrote a test file to {config.describe()}/_sequenzy/")
        progress(f"saved export {record.id}")
        return record

    def role_setup(self, account_id: str) -> RoleSetup:
        body = self.api.call("POST", "/v1/role-setups", json={"account_id": validate_account(account_id)})
        return RoleSetup(body["account_id"], body["external_id"], body["principal_arn"])

    def list(self, *, account_id: str | None = None, include_deleted: bool = False) -> builtins.list[ExportRecord]:
        params: dict[str, str] = {"include_deleted": "true" if include_deleted else "false"}
        if account_id is not None:
            params["account"] = validate_account(account_id)
        return [shapes.export_from_json(e) for e in self.api.call("GET", "/v1/exports", params=params)]

    def status(self, export_id: str) -> ExportStatus:
        status: ExportStatus = shapes.status_from_json(self.api.call("GET", f"/v1/exports/{_id(export_id)}"))
        return status

    def _record(self, method: str, export_id: str, action: str = "", **kwargs: Any) -> ExportRecord:
        path = f"/v1/exports/{_id(export_id)}" + (f"/{action}" if action else "")
        return shapes.export_from_json(self.api.call(method, path, **kwargs))

    def pause(self, export_id: str) -> ExportRecord:
        return self._record("POST", export_id, "pause")

    def resume(self, export_id: str) -> ExportRecord:
        return self._record("POST", export_id, "resume")

    def export_now(self, export_id: str) -> ExportRecord:
        return self._record("POST", export_id, "export-now")

    def change_frequency(self, export_id: str, frequency: str) -> ExportRecord:
        return self._record("PATCH", export_id, "frequency", json={"frequency": frequency})

    def change_format(self, export_id: str, file_format: str) -> ExportRecord:
        return self._record("PATCH", export_id, "format", json={"format": parse_format(file_format)})

    def change_table(self, export_id: str, table: str | None) -> ExportRecord:
        return self._record("PATCH", export_id, "table", json={"table": parse_table(table)})

    def delete(self, export_id: str) -> ExportRecord:
        return self._record("DELETE", export_id)

    def add_datasets(self, export_id: str, datasets: Iterable[str] | str) -> ExportRecord:
        names = parse_datasets(datasets if isinstance(datasets, str) else tuple(datasets))
        return self._record("PATCH", export_id, "datasets", json={"add": list(names)})

    def remove_datasets(self, export_id: str, datasets: Iterable[str] | str) -> ExportRecord:
        names = parse_datasets(datasets if isinstance(datasets, str) else tuple(datasets))
        return self._record("PATCH", export_id, "datasets", json={"remove": list(names)})

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
        _id(export_id)
        secret = secret_access_key() if callable(secret_access_key) else secret_access_key
        values = {
            "provider": provider,
            "bucket": bucket,
            "prefix": prefix,
            "region": region,
            "endpoint": endpoint,
            "access_key_id": access_key_id,
            "secret_access_key": secret,
            "sse": sse,
            "kms_key_id": kms_key_id,
            "role_arn": role_arn,
            "external_id": external_id,
        }
        record = self._record(
            "PATCH", export_id, "destination", json={k: v for k, v in values.items() if v is not None}
        )
        # A new key for the same place (a rotation) is not a move: say which of the two it was.
        moved = any(values[k] is not None for k in ("provider", "bucket", "prefix", "region", "endpoint"))
        what = f"now writes to {record.location}" if moved else "now writes with the new credentials"
        progress(f"connection test passed; saved: export {record.id} {what}")
        return record

    def history(self, export_id: str, *, days: int = 14) -> builtins.list[RunHistory]:
        runs = self.api.call("GET", f"/v1/exports/{_id(export_id)}/history", params={"days": str(days)})
        return [shapes.run_from_json(r) for r in runs]

    def ledger(self, export_id: str) -> builtins.list[LedgerWindow]:
        """Committed windows, shaped as the store's, for `verify.verify_location(ledger=...)`."""
        return [
            LedgerWindow(
                id=i,
                dataset=w["dataset"],
                window=Window(w["from_ms"], w["to_ms"]),
                run_id=w["run_id"],
                status=COMMITTED,
                rows=w["rows"],
                parts=w["parts"],
                bytes=w["bytes"],
                error=None,
                started_at=0,
                finished_at=None,
                snapshot_taken_at=None,
            )
            for i, w in enumerate(self.api.call("GET", f"/v1/exports/{_id(export_id)}/ledger"))
        ]

    def get_export(self, export_id: str) -> ExportRecord:
        return self.status(export_id).export

    def rotate_keys(self) -> RotationReport:
        try:
            return shapes.resealed_from_json(self.api.call("POST", "/v1/admin/rotate-keys"))
        except NotFound:
            # The API hides operator routes from account tokens behind the same 404 as an unknown
            # export: "not found" alone sent operators looking for a missing route.
            raise NotFound(
                f"rotate-keys is for operators: the API at {self.url} answered 'not found', which is its "
                "answer to an account token (or a token of another server); set SEQEXPORT_API_TOKEN to an "
                "operator token (`seqexport tokens create --operator`)"
            ) from None

    def webhooks(self) -> RemoteWebhooks:
        return RemoteWebhooks(self.api)


def _id(export_id: str) -> str:
    return validate_export_id(export_id)  # the same rule as the local API, before anything is sent
