"""The OpenAPI document as Swagger UI (``/docs``) and generated clients need it (issue 42, item 3).

- **Bearer authentication.** Every ``/v1`` operation names the ``bearerAuth`` scheme, so Swagger UI
  shows *Authorize*, and "Try it out" sends ``Authorization: Bearer <token>`` (without it every
  call got 401 from `gate.Gate`).
- **Closed sets are enums** (`CLOSED_SETS`): provider, frequency, format, table, sse, statuses, dataset
  names and webhook event types, in the request bodies and in the answers. The request models keep
  plain bounded strings: the values are checked by `api.Exports`, which names the field and lists
  what it accepts (``frequency: '2h' is not one of 15m, 1h, 6h, 24h``), so a wrong value keeps that
  message. The enums come from the same constants that check, so the two cannot drift apart.
- FastAPI's 422 "HTTPValidationError" on every route with parameters is dropped: ours answer 400,
  and 422 only where a connection test runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from seqexport_dagster.contract.file_format import FORMATS
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.table_format import NONE, TABLES
from seqexport_dagster.contract.window import FREQUENCIES
from seqexport_dagster.destination.config import PROVIDERS
from seqexport_dagster.destination.encryption import SSE_KMS, SSE_S3
from seqexport_dagster.management.history import SUCCEEDED
from seqexport_dagster.store import ACTIVE, DELETED, PAUSED
from seqexport_dagster.store.webhook_records import (
    CANCELED,
    DELIVERED,
    DROPPED,
    EVENT_TYPES,
    FAILED,
    PENDING,
    WEBHOOK_TEST,
)

BEARER: Final = "bearerAuth"
SECURITY_SCHEME: Final = {
    "type": "http",
    "scheme": "bearer",
    "description": "An API token (`sqx_...`) from your operator (`seqexport tokens create`): "
    "an account token sees its own account's exports, an operator token every account's.",
}

_EXPORT: Final = ("ExportJson", "ExportStatusJson")
_DATASET_NAMES: Final = tuple(DATASETS)
_SSE: Final = (SSE_S3, SSE_KMS)
#: (component, property) -> the values it takes. A list property's items take them.
CLOSED_SETS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    **{(c, "provider"): PROVIDERS for c in ("CreateExport", "ChangeDestination", *_EXPORT)},
    **{(c, "frequency"): tuple(FREQUENCIES) for c in ("CreateExport", "ChangeFrequency", *_EXPORT)},
    **{(c, "format"): FORMATS for c in ("CreateExport", "ChangeFormat", *_EXPORT)},
    **{(c, "table"): (*TABLES, NONE) for c in ("CreateExport", "ChangeTable")},  # or null
    **{(c, "table"): TABLES for c in _EXPORT},  # null: no table
    **{(c, "sse"): _SSE for c in ("CreateExport", *_EXPORT)},
    ("ChangeDestination", "sse"): (*_SSE, ""),  # "" returns to the bucket's default
    **{(c, "status"): (ACTIVE, PAUSED, DELETED) for c in _EXPORT},
    ("RunJson", "status"): (SUCCEEDED, "failed", "canceled", "running"),
    ("CreateExport", "datasets"): _DATASET_NAMES,
    ("ChangeDatasets", "add"): _DATASET_NAMES,
    ("ChangeDatasets", "remove"): _DATASET_NAMES,
    **{(c, "dataset"): _DATASET_NAMES for c in ("DatasetJson", "DatasetStatusJson", "LastErrorJson")},
    ("LedgerWindowJson", "dataset"): _DATASET_NAMES,
    ("RunJson", "datasets"): _DATASET_NAMES,
    ("CreateWebhook", "events"): (*EVENT_TYPES, "*"),
    ("WebhookJson", "events"): (*EVENT_TYPES, "*"),
    ("NewWebhookJson", "events"): (*EVENT_TYPES, "*"),
    ("DeliveryJson", "event_type"): (*EVENT_TYPES, WEBHOOK_TEST),
    ("DeliveryJson", "status"): (PENDING, DELIVERED, FAILED, CANCELED, DROPPED),
    **{(c, "status"): ("enabled", "disabled") for c in ("WebhookJson", "NewWebhookJson")},
}


def _restrict(schema: dict[str, Any], values: Iterable[str]) -> int:
    """Puts ``enum`` on every plain string of ``schema`` (inside ``anyOf`` and list items too; a
    ``const`` such as ``"all"`` stays as it is); the number of strings restricted."""
    done = 0
    for member in schema.get("anyOf", ()):
        done += _restrict(member, values)
    if schema.get("type") == "array":
        done += _restrict(schema["items"], values)
    elif schema.get("type") == "string" and "const" not in schema:
        schema["enum"] = list(values)
        done += 1
    return done


def finish(schema: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's document with the bearer scheme, the enums and our 400s (changed in place)."""
    for path, operations in schema.get("paths", {}).items():
        for op in operations.values():
            answer = op.get("responses", {}).get("422", {})
            if "HTTPValidationError" in str(answer):
                del op["responses"]["422"]
            if path.startswith("/v1/"):
                op["security"] = [{BEARER: []}]
    components = schema.setdefault("components", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.get("schemas", {}).pop(name, None)
    components.setdefault("securitySchemes", {})[BEARER] = SECURITY_SCHEME
    for (component, prop), values in CLOSED_SETS.items():
        # A renamed field or model must fail loudly here, not leave a free string in the document.
        if not _restrict(components["schemas"][component]["properties"][prop], values):
            raise ValueError(f"{component}.{prop} has no string to restrict")
    return schema
