"""The webhook sensor: every 30 s, one bounded `webhook_dispatch.dispatch` call; wiring only.

Events are recorded by the control plane in the transactions that cause them (the outbox); this
sensor only sends what is due, so a daemon that was down sends the backlog when it is back. The
tick says what it did in its skip reason; it never requests a run.

A tick's budget is `TICK_BUDGET_S` (18 s, well under the 30 s interval), whatever the receivers do:
no send starts after `DEFAULT_BUDGET_S` (8 s) and every send ends by its own deadline
(`SEND_DEADLINE_S`, 10 s, name lookup included). The instance files run sensors on threads
(``sensors: use_threads``), so even a full tick never delays the scheduler sensor.
"""

from __future__ import annotations

from typing import Final

import dagster as dg

from seqexport_dagster.defs.resources import ExporterResource
from seqexport_dagster.delivery.webhook_dispatch import DEFAULT_BUDGET_S, SEND_DEADLINE_S, dispatch, pinned_sender
from seqexport_dagster.store.webhooks import WebhookStore

WEBHOOK_TICK_SECONDS: Final = 30
#: Per tick: at most this many sends, none started after `DEFAULT_BUDGET_S` (each has its own deadline).
WEBHOOKS_PER_TICK: Final = 200
#: The longest a tick can take (plus the control plane's queries): well under the interval.
TICK_BUDGET_S: Final = DEFAULT_BUDGET_S + SEND_DEADLINE_S


@dg.sensor(
    name="webhook_sensor",
    minimum_interval_seconds=WEBHOOK_TICK_SECONDS,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Sends due account webhooks (signed, retried with backoff); never launches a run.",
)
def webhook_sensor(context: dg.SensorEvaluationContext, exporter: ExporterResource) -> dg.SkipReason:
    control_plane = exporter.control_plane
    store = WebhookStore(control_plane.engine(), control_plane.box())
    report = dispatch(
        store,
        pinned_sender(exporter.operator.policy()),
        exporter.clock.now_ms,
        limit=WEBHOOKS_PER_TICK,
        budget_s=DEFAULT_BUDGET_S,
    )
    words = ", ".join(f"{v} {k}" for k, v in report.as_dict().items() if v)
    return dg.SkipReason(f"webhooks: {words}" if words else "webhooks: nothing due")
