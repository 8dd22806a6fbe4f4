"""The JSON shapes of the API, defined once: `seqexport --json` prints them and the HTTP API returns them.

Each shape is a `TypedDict`, so mypy checks the builders below against it and FastAPI publishes the
same declaration as the response schema in ``/openapi.json``. The ``*_from_json`` functions are the
inverse, for the remote CLI: it rebuilds the records from the HTTP API's answer and prints them with
the same code as the local CLI, so both print the same thing. No shape carries a secret; the access
key id is masked (`mask_key_id`), and masking a masked id changes nothing.

Size: about 400 lines on purpose. Each shape, its builder and its inverse stay side by side, so a field
added to one is seen in the other two (`test_http_service` round-trips them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from typing_extensions import TypedDict

from seqexport_dagster.contract.file_format import DEFAULT_FORMAT, parse_format
from seqexport_dagster.contract.table_format import parse_table
from seqexport_dagster.contract.window import Window, iso_ms, parse_iso_ms
from seqexport_dagster.destination.redaction import mask_key_id as mask_key_id
from seqexport_dagster.errors import sanitize_error
from seqexport_dagster.management.history import RunHistory
from seqexport_dagster.management.status import DatasetStatus, ExportStatus, LastError
from seqexport_dagster.store import DatasetState, ExportRecord, RotationReport, RunSummary


class WindowJson(TypedDict):
    from_ms: int
    to_ms: int


class LastErrorJson(TypedDict):
    dataset: str
    window: WindowJson | None
    message: str
    at: str | None
    attempts: int
    next_retry_at: str | None


class DatasetJson(TypedDict):
    dataset: str
    added_at: str | None
    position_ms: int
    position: str | None


class DatasetStatusJson(DatasetJson):
    #: Event datasets: now − position; null for the snapshot and for a deleted export.
    behind_ms: int | None
    #: The snapshot: how long its day has been due unwritten (0 while on time); null otherwise.
    snapshot_late_ms: int | None
    #: The snapshot: when its day is due (the day's end + lag); null for event datasets.
    snapshot_due_at: str | None
    last_error: LastErrorJson | None


class _ExportFields(TypedDict):
    """What `ExportJson` and `ExportStatusJson` share; they differ in their datasets' shape."""

    id: str
    account_id: str
    status: str
    provider: str
    bucket: str
    prefix: str
    region: str | None
    endpoint: str | None
    access_key_id: str | None
    #: Server-side encryption of every object: AES256, aws:kms (with kms_key_id) or null (the bucket's default).
    sse: str | None
    kms_key_id: str | None
    #: A role written as instead of keys, and the external id its trust policy requires (not secrets).
    role_arn: str | None
    external_id: str | None
    frequency: str
    #: jsonl.gz or parquet: the format of new windows.
    format: str
    #: delta: a Delta Lake table per dataset beside the Parquet parts; null: files only.
    table: str | None
    lag_ms: int
    config_version: int
    destination_version: int
    export_now_requested_at: str | None
    created_at: str | None
    updated_at: str | None
    deleted_at: str | None


class ExportJson(_ExportFields):
    datasets: list[DatasetJson]


class ExportStatusJson(_ExportFields):
    """`ExportJson` with each dataset's delay and last error, the time of the answer and the latest error."""

    datasets: list[DatasetStatusJson]
    now: str | None
    #: The most delayed event dataset's ``behind_ms`` and the snapshot's ``snapshot_late_ms``.
    behind_ms: int | None
    snapshot_late_ms: int | None
    last_error: LastErrorJson | None


class RunJson(TypedDict):
    run_id: str
    started_at: str | None
    finished_at: str | None
    #: succeeded, failed, canceled or running: the run's status in Dagster (issue 17).
    status: str
    #: The UTC day(s) the run wrote, and how it was started (scheduled, export now, backfill, manual).
    days: list[str]
    trigger: str | None
    datasets: list[str]
    windows: int
    rows: int
    files: int
    bytes: int
    error: str | None
    note: str | None


class LedgerWindowJson(TypedDict):
    """A committed window as the ledger records it: what `seqexport verify --ledger` compares."""

    dataset: str
    from_ms: int
    to_ms: int
    rows: int
    parts: int
    bytes: int
    run_id: str | None


class RoleSetupJson(TypedDict):
    """A role setup: the external id Sequenzy generated and the trust policy to paste on the role."""

    account_id: str
    external_id: str
    principal_arn: str
    trust_policy: dict[str, Any]


def role_setup_json(setup: Any) -> RoleSetupJson:
    """``setup`` is a `destination.sts.RoleSetup`."""
    return {
        "account_id": setup.account_id,
        "external_id": setup.external_id,
        "principal_arn": setup.principal_arn,
        "trust_policy": setup.trust_policy,
    }


class TokenJson(TypedDict):
    """An API token as `seqexport tokens` lists it: its id and scope, never its value."""

    id: str
    scope: str
    account_id: str | None
    name: str
    created_at: str | None
    revoked_at: str | None
    expires_at: str | None
    last_used_at: str | None


class RotationFailureJson(TypedDict):
    export_id: str
    error: str


class ResealedJson(TypedDict):
    resealed: int
    #: Secrets that did not open (their key is gone, or their row was altered); left as they were.
    failed: list[RotationFailureJson]


class ErrorDetail(TypedDict, total=False):
    type: str
    message: str
    field: str


class ErrorJson(TypedDict):
    error: ErrorDetail


def _iso(ms: int | None) -> str | None:
    return None if ms is None else iso_ms(ms)


def _ms(text: str | None) -> int | None:
    return None if text is None else parse_iso_ms(text)


def export_json(e: ExportRecord) -> ExportJson:
    return {
        "id": e.id,
        "account_id": e.account_id,
        "status": e.status,
        "provider": e.provider,
        "bucket": e.bucket,
        "prefix": e.prefix,
        "region": e.region,
        "endpoint": e.endpoint,
        "access_key_id": mask_key_id(e.access_key_id),
        "sse": e.sse,
        "kms_key_id": e.kms_key_id,
        "role_arn": e.role_arn,
        "external_id": e.external_id,
        "frequency": e.frequency,
        "format": e.format,
        "table": e.table,
        "lag_ms": e.lag_ms,
        "datasets": [
            {
                "dataset": d.dataset,
                "added_at": _iso(d.added_at),
                "position_ms": d.position_ms,
                "position": _iso(d.position_ms),
            }
            for d in e.datasets
        ],
        "config_version": e.config_version,
        "destination_version": e.destination_version,
        "export_now_requested_at": _iso(e.export_now_at),
        "created_at": _iso(e.created_at),
        "updated_at": _iso(e.updated_at),
        "deleted_at": _iso(e.deleted_at),
    }


def last_error_json(err: LastError | None) -> LastErrorJson | None:
    if err is None:
        return None
    return {
        "dataset": err.dataset,
        "window": None if err.window is None else {"from_ms": err.window.from_ms, "to_ms": err.window.to_ms},
        "message": sanitize_error(err.message),
        "at": _iso(err.at),
        "attempts": err.attempts,
        "next_retry_at": _iso(err.next_retry_at),
    }


def status_json(status: ExportStatus) -> ExportStatusJson:
    body = export_json(status.export)
    return {
        "id": body["id"],
        "account_id": body["account_id"],
        "status": body["status"],
        "provider": body["provider"],
        "bucket": body["bucket"],
        "prefix": body["prefix"],
        "region": body["region"],
        "endpoint": body["endpoint"],
        "access_key_id": body["access_key_id"],
        "sse": body["sse"],
        "kms_key_id": body["kms_key_id"],
        "role_arn": body["role_arn"],
        "external_id": body["external_id"],
        "frequency": body["frequency"],
        "format": body["format"],
        "table": body["table"],
        "lag_ms": body["lag_ms"],
        "datasets": [
            {
                "dataset": d.dataset,
                "added_at": _iso(d.added_at),
                "position_ms": d.position_ms,
                "position": _iso(d.position_ms),
                "behind_ms": d.behind_ms,
                "snapshot_late_ms": d.snapshot_late_ms,
                "snapshot_due_at": _iso(d.snapshot_due_at),
                "last_error": last_error_json(d.last_error),
            }
            for d in status.datasets
        ],
        "config_version": body["config_version"],
        "destination_version": body["destination_version"],
        "export_now_requested_at": body["export_now_requested_at"],
        "created_at": body["created_at"],
        "updated_at": body["updated_at"],
        "deleted_at": body["deleted_at"],
        "now": _iso(status.now_ms),
        "behind_ms": status.behind_ms,
        "snapshot_late_ms": status.snapshot_late_ms,
        "last_error": last_error_json(status.last_error),
    }


def run_json(r: RunSummary | RunHistory) -> RunJson:
    return {
        "run_id": r.run_id,
        "started_at": _iso(r.started_at),
        "finished_at": _iso(r.finished_at),
        "status": r.status,
        "days": list(getattr(r, "days", ())),
        "trigger": getattr(r, "trigger", None),
        "datasets": list(r.datasets),
        "windows": r.windows,
        "rows": r.rows,
        "files": r.files,
        "bytes": r.bytes,
        "error": None if r.error is None else sanitize_error(r.error),
        "note": getattr(r, "note", None),
    }


def resealed_json(report: RotationReport) -> ResealedJson:
    return {
        "resealed": report.resealed,
        "failed": [{"export_id": export_id, "error": sanitize_error(why)} for export_id, why in report.failed],
    }


def resealed_from_json(body: ResealedJson) -> RotationReport:
    return RotationReport(int(body["resealed"]), [(f["export_id"], f["error"]) for f in body.get("failed", [])])


def token_json(token: Any) -> TokenJson:
    """``token`` is a `store.token.ApiToken`."""
    return {
        "id": token.id,
        "scope": token.scope,
        "account_id": token.account_id,
        "name": token.name,
        "created_at": _iso(token.created_at),
        "revoked_at": _iso(token.revoked_at),
        "expires_at": _iso(token.expires_at),
        "last_used_at": _iso(token.last_used_at),
    }


def history_json(runs: Iterable[RunSummary | RunHistory]) -> list[RunJson]:
    return [run_json(r) for r in runs]


def ledger_json(entries: Iterable[Any]) -> list[LedgerWindowJson]:
    """``entries`` are committed `store.LedgerWindow` rows."""
    return [
        {
            "dataset": w.dataset,
            "from_ms": w.window.from_ms,
            "to_ms": w.window.to_ms,
            "rows": w.rows,
            "parts": w.parts,
            "bytes": w.bytes,
            "run_id": w.run_id,
        }
        for w in entries
    ]


def export_from_json(body: ExportJson | ExportStatusJson | dict[str, Any]) -> ExportRecord:
    """The record back from its JSON; dataset error fields come from a status body when present."""
    states = []
    for d in body["datasets"]:
        err: Any = dict(d).get("last_error")
        window = err.get("window") if err else None
        states.append(
            DatasetState(
                dataset=d["dataset"],
                added_at=_ms(d["added_at"]) or 0,
                position_ms=d["position_ms"],
                failures=err["attempts"] if err else 0,
                next_retry_at=_ms(err["next_retry_at"]) if err else None,
                last_error=err["message"] if err else None,
                last_error_at=_ms(err["at"]) if err else None,
                last_error_window=Window(window["from_ms"], window["to_ms"]) if window else None,
            )
        )
    return ExportRecord(
        id=body["id"],
        account_id=body["account_id"],
        provider=body["provider"],
        bucket=body["bucket"],
        region=body["region"],
        endpoint=body["endpoint"],
        prefix=body["prefix"],
        access_key_id=body["access_key_id"],
        frequency=body["frequency"],
        lag_ms=body["lag_ms"],
        status=body["status"],
        config_version=body["config_version"],
        destination_version=body["destination_version"],
        export_now_at=_ms(body["export_now_requested_at"]),
        created_at=_ms(body["created_at"]) or 0,
        updated_at=_ms(body["updated_at"]) or 0,
        deleted_at=_ms(body["deleted_at"]),
        datasets=tuple(states),
        sse=body.get("sse"),
        kms_key_id=body.get("kms_key_id"),
        role_arn=body.get("role_arn"),
        external_id=body.get("external_id"),
        format=parse_format(body.get("format", DEFAULT_FORMAT)),
        table=parse_table(body.get("table")),
    )


def run_from_json(r: RunJson | dict[str, Any]) -> RunHistory:
    return RunHistory(
        run_id=r["run_id"],
        started_at=_ms(r["started_at"]) or 0,
        finished_at=_ms(r["finished_at"]),
        status=r["status"],
        datasets=tuple(r["datasets"]),
        days=tuple(r.get("days") or ()),
        trigger=r.get("trigger"),
        note=r.get("note"),
        windows=r["windows"],
        rows=r["rows"],
        files=r["files"],
        bytes=r["bytes"],
        error=r["error"],
    )


def status_from_json(body: ExportStatusJson | dict[str, Any]) -> ExportStatus:
    """The `status.ExportStatus` back from its JSON (for the remote CLI, which prints it as the local one does)."""

    def error(err: LastErrorJson | None) -> LastError | None:
        if err is None:
            return None
        window = err["window"]
        return LastError(
            dataset=err["dataset"],
            window=Window(window["from_ms"], window["to_ms"]) if window else None,
            message=err["message"],
            at=_ms(err["at"]),
            attempts=err["attempts"],
            next_retry_at=_ms(err["next_retry_at"]),
        )

    return ExportStatus(
        export=export_from_json(body),
        now_ms=_ms(body["now"]) or 0,
        datasets=tuple(
            DatasetStatus(
                dataset=d["dataset"],
                added_at=_ms(d["added_at"]) or 0,
                position_ms=d["position_ms"],
                behind_ms=d["behind_ms"],
                last_error=error(d["last_error"]),
                snapshot_late_ms=d["snapshot_late_ms"],
                snapshot_due_at=_ms(d["snapshot_due_at"]),
            )
            for d in body["datasets"]
        ),
    )
