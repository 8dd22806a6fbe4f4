"""The ``/v1/webhooks`` routes: thin, over `tenancy.ScopedWebhooks`, answering with the
`webhook_presentation` shapes. The app's gate, body limits and error boundary apply as to every
``/v1`` route (`service.app`); an add takes an Idempotency-Key, and its replay answers without the
secret, which the control plane never keeps in clear.
"""

# No `from __future__ import annotations`: FastAPI reads the route annotations at run time.
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse, Response

from seqexport_dagster.management import webhook_presentation as shapes
from seqexport_dagster.management.tenancy import ScopedWebhooks
from seqexport_dagster.management.webhooks_api import Webhooks
from seqexport_dagster.service.body import CreateWebhook
from seqexport_dagster.service.guard import idempotent
from seqexport_dagster.store.idempotency import IdempotencyStore


def _without_secret(result: object) -> object:
    if isinstance(result, dict):
        return {**result, "secret": None}
    return result


def add_webhook_routes(
    app: FastAPI,
    webhooks: Webhooks,
    *,
    keys: IdempotencyStore,
    fingerprint_key: bytes,
    errors: dict[int | str, dict[str, Any]],
    clock: Callable[[], int],
) -> None:
    def scoped(request: Request) -> ScopedWebhooks:
        return ScopedWebhooks(webhooks, request.state.caller)

    Scoped = Annotated[ScopedWebhooks, Depends(scoped)]
    IdempotencyKey = Annotated[
        str | None, Header(alias="Idempotency-Key", description="repeat within 24 h: the first answer again")
    ]

    def ok(value: object, status: int = 200) -> JSONResponse:
        return JSONResponse(value, status_code=status)

    @app.get("/v1/webhooks", response_model=list[shapes.WebhookJson], responses=errors, tags=["webhooks"])
    def list_webhooks(api: Scoped, account: str | None = None) -> Response:
        """The token's account's webhooks (an operator token: all, or one ``account``)."""
        return ok([shapes.webhook_json(w) for w in api.list(account)])

    @app.post(
        "/v1/webhooks", response_model=shapes.NewWebhookJson, status_code=201, responses=errors, tags=["webhooks"]
    )
    def add_webhook(api: Scoped, body: CreateWebhook, idempotency_key: IdempotencyKey = None) -> Response:
        """Add an endpoint. The answer's ``secret`` signs every event: it is shown this once (a replay
        with the same Idempotency-Key answers ``secret: null``)."""
        account = api.account_for_create(body.account_id)

        def run() -> tuple[int, object]:
            added = api.add(
                account_id=account,
                url=body.url,
                events=body.events,
                description=body.description,
                failing_after=body.failing_after,
            )
            return 201, shapes.new_webhook_json(added)

        return idempotent(
            keys,
            caller=api.caller.namespace,
            key=idempotency_key,
            operation="POST /v1/webhooks",
            body=body.fingerprint_body(),
            fingerprint_key=fingerprint_key,
            now_ms=clock(),
            run=run,
            replay_body=_without_secret,
        )

    @app.get("/v1/webhooks/{webhook_id}", response_model=shapes.WebhookJson, responses=errors, tags=["webhooks"])
    def get_webhook(api: Scoped, webhook_id: str) -> Response:
        """One endpoint (never its secret)."""
        return ok(shapes.webhook_json(api.get(webhook_id)))

    @app.delete("/v1/webhooks/{webhook_id}", response_model=shapes.WebhookJson, responses=errors, tags=["webhooks"])
    def remove_webhook(api: Scoped, webhook_id: str) -> Response:
        """Stop sending to it; pending deliveries are canceled, the delivery log stays readable."""
        return ok(shapes.webhook_json(api.remove(webhook_id)))

    @app.post(
        "/v1/webhooks/{webhook_id}/test",
        response_model=shapes.DeliveryJson,
        status_code=202,
        responses=errors,
        tags=["webhooks"],
    )
    def test_webhook(api: Scoped, webhook_id: str) -> Response:
        """Queue a ``webhook.test`` event (202): the next dispatch sends it, within about 30 s. The
        answer is its pending delivery; ``GET .../deliveries`` shows the attempts. At most 10 per
        10 minutes per account (429 past it); a disabled webhook is refused (409) until enabled."""
        return ok(shapes.delivery_json(api.test(webhook_id)), 202)

    @app.post(
        "/v1/webhooks/{webhook_id}/enable", response_model=shapes.WebhookJson, responses=errors, tags=["webhooks"]
    )
    def enable_webhook(api: Scoped, webhook_id: str) -> Response:
        """Re-enable a webhook its circuit breaker disabled; the deliveries that waited go out next."""
        return ok(shapes.webhook_json(api.enable(webhook_id)))

    @app.post(
        "/v1/webhooks/{webhook_id}/rotate-secret",
        response_model=shapes.NewWebhookJson,
        responses=errors,
        tags=["webhooks"],
    )
    def rotate_webhook_secret(api: Scoped, webhook_id: str) -> Response:
        """A new signing secret, shown this once (the old one stops signing at once); the webhook,
        its id and its delivery log stay."""
        return ok(shapes.new_webhook_json(api.rotate_secret(webhook_id)))

    @app.get(
        "/v1/webhooks/{webhook_id}/deliveries",
        response_model=list[shapes.DeliveryJson],
        responses=errors,
        tags=["webhooks"],
    )
    def webhook_deliveries(api: Scoped, webhook_id: str, limit: int = 50) -> Response:
        """The delivery log, newest first: each event's status and every attempt (time, status code, error)."""
        return ok([shapes.delivery_json(d) for d in api.deliveries(webhook_id, limit=limit)])

    @app.post("/v1/admin/webhooks/dispatch", response_model=shapes.DispatchJson, responses=errors, tags=["operators"])
    def dispatch_webhooks(api: Scoped, limit: int = 20) -> Response:
        """Operators: send due deliveries now (the Dagster sensor does this every 30 s)."""
        return ok(api.dispatch(limit=limit).as_dict())
