"""The HTTP API: thin routes over `tenancy.ScopedExports`, answering with the `presentation` shapes.

Order of a request: `gate.Gate` (plain ASGI middleware) authenticates every ``/v1`` request before
routing, so a request without a valid token gets 401 and nothing else, whatever its path,
parameters or body, and writes the access log.
Under the gate, `limits.BoundedBodies` bounds and checks the body (size, time, UTF-8 JSON, depth,
digits) before FastAPI parses it, so a 401 never costs a read of the body and a malformed one is a
400 naming the problem. The route then calls the scoped API; every exception leaves through
`errors.to_response` (the one boundary), so no traceback reaches a client or the log.
`/healthz` answers from `health.ControlPlaneHealth` (a check at most once a second); `/readyz`
checks on every request.
"""

# No `from __future__ import annotations`: FastAPI reads the route annotations at run time, and
# some of them (Scoped, IdempotencyKey) are local to create_app.
from collections.abc import Callable, Coroutine
from typing import Annotated, Any, Final

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.errors import InvalidInput
from seqexport_dagster.management import presentation as shapes
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.tenancy import Caller, ScopedExports
from seqexport_dagster.service.body import (
    ChangeDatasets,
    ChangeDestination,
    ChangeFormat,
    ChangeFrequency,
    ChangeTable,
    CreateExport,
    NewRoleSetup,
)
from seqexport_dagster.service.docs_page import add_docs_page
from seqexport_dagster.service.errors import error_response, to_response, unavailable
from seqexport_dagster.service.errors import validation_response as validation_error
from seqexport_dagster.service.gate import Gate
from seqexport_dagster.service.guard import RateLimit, idempotent
from seqexport_dagster.service.health import ControlPlaneHealth
from seqexport_dagster.service.limits import BoundedBodies, Limits
from seqexport_dagster.service.openapi import finish
from seqexport_dagster.service.webhook_routes import add_webhook_routes
from seqexport_dagster.store.idempotency import IdempotencyStore
from seqexport_dagster.store.token import TokenStore

ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    400: {"model": shapes.ErrorJson, "description": "a value is wrong; `field` names it"},
    401: {"model": shapes.ErrorJson, "description": "no token, or a wrong or revoked one"},
    404: {"model": shapes.ErrorJson, "description": "no such export (or not this account's)"},
    409: {"model": shapes.ErrorJson, "description": "not possible in the export's current state"},
    503: {"model": shapes.ErrorJson, "description": "the control plane is briefly unavailable (Retry-After)"},
}
WRITES: Final[dict[int | str, dict[str, Any]]] = {
    **ERRORS,
    422: {"model": shapes.ErrorJson, "description": "the connection test failed; nothing was saved"},
    429: {"model": shapes.ErrorJson, "description": "too many destination writes for this account (Retry-After)"},
}


def validation_response(exc: RequestValidationError) -> JSONResponse:
    """Pydantic's complaint without its ``input`` (which could be a secret): `errors.validation_message`."""
    return validation_error(exc.errors())


class _GuardedRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return validation_response(exc)
            except Exception as exc:  # the one boundary: our error tree, or a bare type name
                return to_response(exc)

        return guarded


def create_app(exports: Exports, *, write_limit: RateLimit | None = None, limits: Limits | None = None) -> FastAPI:
    tokens = TokenStore(exports.store.engine)
    keys = IdempotencyStore(exports.store.engine)
    # The fingerprint key: derived from the credential keys, which the control plane never holds.
    fingerprint_key = exports.store.box.derived_key("idempotency-fingerprint")
    limit = write_limit or RateLimit()
    app = FastAPI(
        title="Sequenzy Data Exports",
        version="1",
        description="Manage data exports into your own bucket. Authenticate with `Authorization: Bearer <token>` "
        "(on this page: **Authorize**, then paste the token).",
        docs_url=None,
        redoc_url=None,
    )
    app.router.route_class = _GuardedRoute
    app.add_middleware(BoundedBodies, limits=limits or Limits())  # under the gate: added before it

    def authenticate(token: str) -> Caller | None:
        found = tokens.authenticate(token, now_ms=exports.clock())
        return None if found is None else Caller(found.account_id, found.id)

    app.add_middleware(Gate, authenticate=authenticate)  # outermost of ours: before the body bounds

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found" if exc.status_code == 404 else "http_error"
        return error_response(exc.status_code, kind, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_response(exc)

    def scoped(request: Request) -> ScopedExports:
        return ScopedExports(exports, request.state.caller)

    Scoped = Annotated[ScopedExports, Depends(scoped)]
    IdempotencyKey = Annotated[
        str | None, Header(alias="Idempotency-Key", description="repeat within 24 h: the first answer again")
    ]

    def ok(value: object, status: int = 200) -> JSONResponse:
        return JSONResponse(value, status_code=status)

    def control_plane_answers(check_version: bool = False) -> bool:
        try:
            with exports.store.engine.connect() as conn:
                conn.execute(sa.text("SELECT 1"))
                if check_version:
                    conn.execute(sa.text("SELECT version_num FROM alembic_version")).all()
        except Exception:
            return False
        return True

    health = ControlPlaneHealth(control_plane_answers)

    @app.get("/healthz", tags=["health"], responses={503: ERRORS[503]})
    async def healthz() -> Response:
        """The process answers and reached the control plane within the last second or so."""
        return ok({"status": "ok"}) if await health.healthy() else unavailable()

    @app.get("/readyz", tags=["health"], responses={503: ERRORS[503]})
    def readyz() -> Response:
        """Ready for traffic: the control plane answers and is migrated."""
        return ok({"status": "ok"}) if control_plane_answers(check_version=True) else unavailable()

    @app.get("/v1/exports", response_model=list[shapes.ExportJson], responses=ERRORS, tags=["exports"])
    def list_exports(api: Scoped, account: str | None = None, include_deleted: bool = False) -> Response:
        """Exports of the token's account (an operator token: all, or one ``account``)."""
        return ok([shapes.export_json(r) for r in api.list(account_id=account, include_deleted=include_deleted)])

    @app.post("/v1/exports", response_model=shapes.ExportJson, status_code=201, responses=WRITES, tags=["exports"])
    def create_export(api: Scoped, body: CreateExport, idempotency_key: IdempotencyKey = None) -> Response:
        """Create an export: every value is checked, then a test file is written, then it is saved."""
        account = api.account_for_create(body.account_id)

        def run() -> tuple[int, object]:
            limit.check(account)
            secret = body.secret_access_key.get_secret_value() if body.secret_access_key else None
            record = api.create(
                account_id=account,
                provider=body.provider,
                bucket=body.bucket,
                prefix=body.prefix,
                region=body.region,
                endpoint=body.endpoint,
                access_key_id=body.access_key_id,
                secret_access_key=secret,
                datasets=list(DATASETS) if body.datasets == "all" else body.datasets,
                frequency=body.frequency,
                lag_ms=body.lag_ms,
                sse=body.sse,
                kms_key_id=body.kms_key_id,
                role_arn=body.role_arn,
                external_id=body.external_id,
                file_format=body.format,
                table=body.table,
            )
            return 201, shapes.export_json(record)

        return idempotent(
            keys,
            caller=api.caller.namespace,
            key=idempotency_key,
            operation="POST /v1/exports",
            body=body.fingerprint_body(),
            fingerprint_key=fingerprint_key,
            now_ms=exports.clock(),
            run=run,
        )

    @app.post(
        "/v1/role-setups", response_model=shapes.RoleSetupJson, status_code=201, responses=ERRORS, tags=["exports"]
    )
    def new_role_setup(api: Scoped, body: NewRoleSetup) -> Response:
        """An external id for a role export, generated by us, with the trust policy to paste on the role."""
        return ok(shapes.role_setup_json(api.role_setup(body.account_id)), 201)

    @app.get("/v1/exports/{export_id}", response_model=shapes.ExportStatusJson, responses=ERRORS, tags=["exports"])
    def export_status(api: Scoped, export_id: str) -> Response:
        """State, each dataset's position and delay, and the last error (until a run succeeds)."""
        return ok(shapes.status_json(api.status(export_id)))

    @app.delete("/v1/exports/{export_id}", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"])
    def delete_export(api: Scoped, export_id: str) -> Response:
        """Stop for good; files stay in the bucket and the history stays readable."""
        return ok(shapes.export_json(api.delete(export_id)))

    @app.post("/v1/exports/{export_id}/pause", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"])
    def pause_export(api: Scoped, export_id: str) -> Response:
        """Pause; the position is kept."""
        return ok(shapes.export_json(api.pause(export_id)))

    @app.post("/v1/exports/{export_id}/resume", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"])
    def resume_export(api: Scoped, export_id: str) -> Response:
        """Resume; the backlog is caught up from the kept position with no gap."""
        return ok(shapes.export_json(api.resume(export_id)))

    @app.post(
        "/v1/exports/{export_id}/export-now", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"]
    )
    def export_now(api: Scoped, export_id: str, idempotency_key: IdempotencyKey = None) -> Response:
        """Run at the next scheduler tick, without waiting for the schedule or a backoff."""
        api.get(export_id)  # the id is valid and the caller's before any key is stored or replayed
        return idempotent(
            keys,
            caller=api.caller.namespace,
            key=idempotency_key,
            operation="POST /v1/exports/{export_id}/export-now",
            body={"export_id": export_id},
            fingerprint_key=fingerprint_key,
            now_ms=exports.clock(),
            run=lambda: (200, shapes.export_json(api.export_now(export_id))),
        )

    @app.patch("/v1/exports/{export_id}/datasets", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"])
    def change_datasets(api: Scoped, export_id: str, body: ChangeDatasets) -> Response:
        """Add datasets (each starts from now) or remove them (their files stay): one of the two per call."""
        if bool(body.add) == bool(body.remove):
            raise InvalidInput("datasets", "give either add or remove, with at least one dataset")
        record = api.add_datasets(export_id, body.add) if body.add else api.remove_datasets(export_id, body.remove)
        return ok(shapes.export_json(record))

    @app.patch(
        "/v1/exports/{export_id}/frequency", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"]
    )
    def change_frequency(api: Scoped, export_id: str, body: ChangeFrequency) -> Response:
        """Change how often windows are written; each dataset continues from its position on the new grid."""
        return ok(shapes.export_json(api.change_frequency(export_id, body.frequency)))

    @app.patch("/v1/exports/{export_id}/format", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"])
    def change_format(api: Scoped, export_id: str, body: ChangeFormat) -> Response:
        """Change the file format (jsonl.gz or parquet) from each dataset's next window."""
        return ok(shapes.export_json(api.change_format(export_id, body.format)))

    @app.patch("/v1/exports/{export_id}/table", response_model=shapes.ExportJson, responses=ERRORS, tags=["exports"])
    def change_table(api: Scoped, export_id: str, body: ChangeTable) -> Response:
        """Keep a Delta Lake table per dataset (delta, Parquet exports only) or stop (null): from each
        dataset's next commit; turned off, the log written stays, and turned on again it continues."""
        return ok(shapes.export_json(api.change_table(export_id, body.table)))

    @app.patch(
        "/v1/exports/{export_id}/destination", response_model=shapes.ExportJson, responses=WRITES, tags=["exports"]
    )
    def change_destination(api: Scoped, export_id: str, body: ChangeDestination) -> Response:
        """Move the export or rotate its keys: the test file is written at the new place before saving."""
        record = api.get(export_id)
        limit.check(record.account_id)
        changed = api.change_destination(
            export_id,
            provider=body.provider,
            bucket=body.bucket,
            prefix=body.prefix,
            region=body.region,
            endpoint=body.endpoint,
            access_key_id=body.access_key_id,
            secret_access_key=body.secret_access_key.get_secret_value() if body.secret_access_key else None,
            sse=body.sse,
            kms_key_id=body.kms_key_id,
            role_arn=body.role_arn,
            external_id=body.external_id,
        )
        return ok(shapes.export_json(changed))

    @app.get("/v1/exports/{export_id}/history", response_model=list[shapes.RunJson], responses=ERRORS, tags=["exports"])
    def export_history(api: Scoped, export_id: str, days: int = 14) -> Response:
        """Every run of the last ``days`` (1 to 14) days, newest first: rows, files, size and error."""
        return ok(shapes.history_json(api.history(export_id, days=days)))

    @app.get(
        "/v1/exports/{export_id}/ledger",
        response_model=list[shapes.LedgerWindowJson],
        responses=ERRORS,
        tags=["exports"],
    )
    def export_ledger(api: Scoped, export_id: str) -> Response:
        """Committed windows with their rows: `seqexport verify --ledger` compares them with the bucket."""
        return ok(shapes.ledger_json(api.ledger(export_id)))

    @app.post("/v1/admin/rotate-keys", response_model=shapes.ResealedJson, responses=ERRORS, tags=["operators"])
    def rotate_keys(api: Scoped) -> Response:
        """Operators: re-seal stored secrets with the first key of SEQEXPORT_SECRET_KEYS."""
        return ok(shapes.resealed_json(api.rotate_keys()))

    add_webhook_routes(
        app, exports.webhooks(), keys=keys, fingerprint_key=fingerprint_key, errors=ERRORS, clock=exports.clock
    )

    original_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = finish(original_openapi())
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    add_docs_page(app)
    return app
