"""Account isolation, in one place: every call the HTTP API makes on behalf of a token goes through here.

`ScopedExports` wraps `api.Exports` for one caller. An account token reaches only its own account's
exports: another account's export id raises the same `NotFound`, with the same message, as an id
that does not exist, so ids cannot be probed. An operator token (``account_id=None``) sees every
account. Nothing in the HTTP layer checks accounts itself; it only ever holds a `ScopedExports`.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from seqexport_dagster.contract.validation import validate_account
from seqexport_dagster.delivery.webhook import validate_webhook_id
from seqexport_dagster.delivery.webhook_dispatch import DispatchReport
from seqexport_dagster.destination.role import RoleSetup
from seqexport_dagster.errors import InvalidInput, NotFound
from seqexport_dagster.management.api import Exports
from seqexport_dagster.management.history import RunHistory
from seqexport_dagster.management.status import ExportStatus
from seqexport_dagster.management.webhooks_api import Webhooks
from seqexport_dagster.store import COMMITTED, ExportRecord, LedgerWindow, RotationReport
from seqexport_dagster.store.webhook_records import DeliveryRecord, NewEndpoint, WebhookEndpoint


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: an account, or the operator scope (``account_id is None``)."""

    account_id: str | None
    token_id: str

    @property
    def is_operator(self) -> bool:
        return self.account_id is None

    @property
    def label(self) -> str:
        """For access logs: the account, or ``operator`` (a name no account may take: `validation`)."""
        return "operator" if self.account_id is None else self.account_id

    @property
    def namespace(self) -> str:
        """For Idempotency-Key scoping: scope and account, so no account name can reach another's keys."""
        return "operator:" if self.account_id is None else f"account:{self.account_id}"


class ScopedExports:
    def __init__(self, exports: Exports, caller: Caller) -> None:
        self.exports = exports
        self.caller = caller

    def _own(self, export_id: str) -> ExportRecord:
        record = self.exports.get(export_id)
        if self.caller.account_id is not None and record.account_id != self.caller.account_id:
            # Word for word the store's message for a missing id.
            raise NotFound(f"export {export_id!r} not found")
        return record

    def account_for_create(self, account_id: str | None) -> str:
        """The account a new export belongs to: the token's own, or the operator's explicit choice."""
        if self.caller.account_id is None:
            if not account_id:
                raise InvalidInput("account_id", "an operator token must name the account the export belongs to")
            return validate_account(account_id)
        if account_id and account_id != self.caller.account_id:
            raise InvalidInput(
                "account_id", "leave it out or give your own account: a token creates exports only there"
            )
        return self.caller.account_id

    def role_setup(self, account_id: str | None) -> RoleSetup:
        return self.exports.role_setup(self.account_for_create(account_id))

    def create(self, *, account_id: str | None, **kwargs: Any) -> ExportRecord:
        return self.exports.create(account_id=self.account_for_create(account_id), **kwargs)

    def list(self, *, account_id: str | None = None, include_deleted: bool = False) -> builtins.list[ExportRecord]:
        if self.caller.account_id is not None:
            if account_id is not None and account_id != self.caller.account_id:
                return []  # another account's list looks exactly like an account with no exports
            account_id = self.caller.account_id
        return self.exports.list(account_id=account_id, include_deleted=include_deleted)

    def get(self, export_id: str) -> ExportRecord:
        return self._own(export_id)

    def status(self, export_id: str) -> ExportStatus:
        return self.exports.status_of(self._own(export_id))

    def pause(self, export_id: str) -> ExportRecord:
        self._own(export_id)
        return self.exports.pause(export_id)

    def resume(self, export_id: str) -> ExportRecord:
        self._own(export_id)
        return self.exports.resume(export_id)

    def export_now(self, export_id: str) -> ExportRecord:
        self._own(export_id)
        return self.exports.export_now(export_id)

    def change_frequency(self, export_id: str, frequency: str) -> ExportRecord:
        self._own(export_id)
        return self.exports.change_frequency(export_id, frequency)

    def change_table(self, export_id: str, table: str | None) -> ExportRecord:
        self._own(export_id)
        return self.exports.change_table(export_id, table)

    def change_format(self, export_id: str, file_format: str) -> ExportRecord:
        self._own(export_id)
        return self.exports.change_format(export_id, file_format)

    def delete(self, export_id: str) -> ExportRecord:
        self._own(export_id)
        return self.exports.delete(export_id)

    def add_datasets(self, export_id: str, datasets: Iterable[str] | str) -> ExportRecord:
        self._own(export_id)
        return self.exports.add_datasets(export_id, datasets)

    def remove_datasets(self, export_id: str, datasets: Iterable[str] | str) -> ExportRecord:
        self._own(export_id)
        return self.exports.remove_datasets(export_id, datasets)

    def change_destination(self, export_id: str, **kwargs: Any) -> ExportRecord:
        self._own(export_id)
        return self.exports.change_destination(export_id, **kwargs)

    def history(self, export_id: str, days: int = 14) -> builtins.list[RunHistory]:
        self._own(export_id)
        return self.exports.history(export_id, days=days)

    def ledger(self, export_id: str) -> builtins.list[LedgerWindow]:
        """Committed windows, for `seqexport verify --ledger` run by a customer with a read key."""
        record = self._own(export_id)
        return [w for w in self.exports.store.ledger(record.id) if w.status == COMMITTED]

    def rotate_keys(self) -> RotationReport:
        if not self.caller.is_operator:
            raise NotFound("not found")
        return self.exports.rotate_keys()


class ScopedWebhooks:
    """`webhooks_api.Webhooks` for one caller: an account token reaches only its own account's
    webhooks; another account's webhook id is `NotFound`, word for word as a missing one."""

    def __init__(self, webhooks: Webhooks, caller: Caller) -> None:
        self.webhooks = webhooks
        self.caller = caller

    def _own(self, webhook_id: str, *, include_deleted: bool = False) -> WebhookEndpoint:
        endpoint = self.webhooks.store.get_endpoint(validate_webhook_id(webhook_id), include_deleted=include_deleted)
        if self.caller.account_id is not None and endpoint.account_id != self.caller.account_id:
            raise NotFound(f"webhook {webhook_id!r} not found")
        return endpoint

    def account_for_create(self, account_id: str | None) -> str:
        if self.caller.account_id is None:
            if not account_id:
                raise InvalidInput("account_id", "an operator token must name the account the webhook belongs to")
            return validate_account(account_id)
        if account_id and account_id != self.caller.account_id:
            raise InvalidInput("account_id", "leave it out or give your own account: a token adds webhooks only there")
        return self.caller.account_id

    def add(self, *, account_id: str | None, **kwargs: Any) -> NewEndpoint:
        return self.webhooks.add(account_id=self.account_for_create(account_id), **kwargs)

    def list(self, account_id: str | None = None) -> builtins.list[WebhookEndpoint]:
        if self.caller.account_id is not None:
            if account_id is not None and account_id != self.caller.account_id:
                return []
            account_id = self.caller.account_id
        return self.webhooks.list(account_id)

    def get(self, webhook_id: str) -> WebhookEndpoint:
        return self._own(webhook_id)

    def remove(self, webhook_id: str) -> WebhookEndpoint:
        self._own(webhook_id)
        return self.webhooks.remove(webhook_id)

    def test(self, webhook_id: str) -> DeliveryRecord:
        self._own(webhook_id)
        return self.webhooks.test(webhook_id)

    def enable(self, webhook_id: str) -> WebhookEndpoint:
        self._own(webhook_id)
        return self.webhooks.enable(webhook_id)

    def rotate_secret(self, webhook_id: str) -> NewEndpoint:
        self._own(webhook_id)
        return self.webhooks.rotate_secret(webhook_id)

    def deliveries(self, webhook_id: str, *, limit: int = 50) -> builtins.list[DeliveryRecord]:
        self._own(webhook_id, include_deleted=True)
        return self.webhooks.deliveries(webhook_id, limit=limit)

    def dispatch(self, *, limit: int = 20) -> DispatchReport:
        if not self.caller.is_operator:
            raise NotFound("not found")
        return self.webhooks.dispatch(limit=limit)
