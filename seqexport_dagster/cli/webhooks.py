"""``seqexport webhooks add|list|remove|test|enable|rotate-secret|deliveries|dispatch``: one call into `webhooks_api.Webhooks`
(or, with ``SEQEXPORT_API_URL``, `remote_webhooks.RemoteWebhooks`) and one view each.

``add`` and ``rotate-secret`` print the endpoint's signing secret once; it is never shown again, by
any command or the API. ``test`` queues the test event (the next dispatch sends it).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from seqexport_dagster.cli.exits import EXIT_OK
from seqexport_dagster.cli.render import Output, table, when
from seqexport_dagster.errors import InvalidInput

if TYPE_CHECKING:
    from seqexport_dagster.cli.commands import AnyExports
    from seqexport_dagster.store.webhook_records import DeliveryRecord, NewEndpoint, WebhookEndpoint

ACTIONS = ("add", "list", "remove", "test", "enable", "rotate-secret", "deliveries", "dispatch")


def _need_id(args: argparse.Namespace) -> str:
    if not args.webhook_id:
        raise InvalidInput("webhook_id", f"`seqexport webhooks {args.action}` needs the webhook's id, whk_...")
    return str(args.webhook_id)


def _limit(text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidInput("limit", f"{text[:40]!r} is not a whole number") from None


def webhooks(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    hooks = api.webhooks()
    action = args.action
    if action == "add":
        if not args.account:
            raise InvalidInput("account", "`seqexport webhooks add` needs --account, the Sequenzy account id")
        if not args.url:
            raise InvalidInput("url", "`seqexport webhooks add` needs --url, the https:// URL to receive events")
        added(
            out,
            hooks.add(
                account_id=args.account,
                url=args.url,
                events=args.events,
                description=args.description,
                failing_after=args.failing_after,
            ),
        )
    elif action == "list":
        endpoint_list(out, hooks.list(args.account))
    elif action == "remove":
        endpoint = hooks.remove(_need_id(args))
        _show(out, endpoint, f"Webhook {endpoint.id} is removed; nothing more is sent to it (its log stays).")
    elif action == "test":
        delivery = hooks.test(_need_id(args))
        delivery_list(out, [delivery])
        if not out.as_json:
            out.line(
                f"Queued: the next dispatch (within 30 s) sends it; `seqexport webhooks deliveries "
                f"{delivery.endpoint_id}` shows the attempts."
            )
    elif action == "enable":
        endpoint = hooks.enable(_need_id(args))
        _show(
            out,
            endpoint,
            f"Webhook {endpoint.id} is enabled; the deliveries that waited go out with the next dispatch.",
        )
    elif action == "rotate-secret":
        rotated(out, hooks.rotate_secret(_need_id(args)))
    elif action == "deliveries":
        delivery_list(out, hooks.deliveries(_need_id(args), limit=_limit(args.limit, 50)))
    else:
        report = hooks.dispatch(limit=_limit(args.limit, 20))
        if out.as_json:
            out.json(report.as_dict())
        else:
            out.line(", ".join(f"{v} {k}" for k, v in report.as_dict().items()) + ".")
    return EXIT_OK


def _json(endpoint: WebhookEndpoint) -> dict[str, object]:
    from seqexport_dagster.management.webhook_presentation import webhook_json

    return dict(webhook_json(endpoint))


def _show(out: Output, endpoint: WebhookEndpoint, sentence: str) -> None:
    if out.as_json:
        out.json(_json(endpoint))
    else:
        out.line(sentence)


def added(out: Output, new: NewEndpoint) -> None:
    """The one time the secret is shown: printed past `Output`, which would scrub it."""
    e = new.endpoint
    if out.as_json:
        print(json.dumps({**_json(e), "secret": new.secret}, indent=2))
        return
    out.line(
        f"Added webhook {e.id} for account {e.account_id}: {e.url} ({', '.join(e.events)}; "
        f"export.failing after {e.failing_after} failures in a row)."
    )
    out.line("Its signing secret is shown only now; store it where your receiver reads it:")
    print(new.secret)


def rotated(out: Output, new: NewEndpoint) -> None:
    """The new secret's one showing, past `Output` like an add's."""
    if out.as_json:
        print(json.dumps({**_json(new.endpoint), "secret": new.secret}, indent=2))
        return
    out.line(f"Webhook {new.endpoint.id} has a new signing secret; the old one signs nothing from now on.")
    out.line("It is shown only now; give it to your receiver:")
    print(new.secret)


def endpoint_list(out: Output, endpoints: list[WebhookEndpoint]) -> None:
    if out.as_json:
        out.json([_json(e) for e in endpoints])
    elif not endpoints:
        out.line("No webhooks.")
    else:
        rows = [
            (
                e.id,
                e.account_id,
                e.url,
                ",".join(e.events),
                str(e.failing_after),
                "enabled" if e.enabled else f"disabled {when(e.disabled_at)}",
                when(e.created_at),
            )
            for e in endpoints
        ]
        out.line(table(("WEBHOOK", "ACCOUNT", "URL", "EVENTS", "FAILING AFTER", "STATUS", "CREATED (UTC)"), rows))
        for e in endpoints:
            if not e.enabled:
                out.line(f"{e.id}: {e.disabled_reason}; `seqexport webhooks enable {e.id}` sends again.")


def delivery_list(out: Output, deliveries: list[DeliveryRecord]) -> None:
    from seqexport_dagster.management.webhook_presentation import delivery_json

    if out.as_json:
        out.json([delivery_json(d) for d in deliveries])
        return
    if not deliveries:
        out.line("No deliveries.")
        return
    rows: list[tuple[object, ...]] = []
    for d in deliveries:
        last = d.log[-1] if d.log else None
        rows.append(
            (
                d.id,
                d.event_id,
                d.event_type,
                d.status,
                d.attempts,
                when(last.attempted_at) if last else None,
                last.status_code if last and last.status_code is not None else None,
                (last.error if last else None) or None,
                when(d.next_attempt_at),
            )
        )
    headers = ("DELIVERY", "EVENT", "TYPE", "STATUS", "ATTEMPTS", "LAST (UTC)", "HTTP", "ERROR", "NEXT (UTC)")
    out.line(table(headers, rows))
