"""Accounts, webhooks and due events in one revision's control plane, for the webhook benchmarks
(`benchmarks.sensor_interval`, `benchmarks.webhook_isolation`).

The setup runs as a script under that revision's code (``PYTHONPATH`` at its tree), so the "before"
revision writes its own schema; it uses only what both revisions offer (``Exports.webhooks().add``,
``TokenStore.create``, ``outbox.emit``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

_PREPARE = """
import json, sys
from seqexport_dagster.delivery.settings import Settings
from seqexport_dagster.management.api import Exports
from seqexport_dagster.store.outbox import emit
from seqexport_dagster.store.token import TokenStore
plan = json.loads(sys.argv[1])
api = Exports.from_settings(Settings.from_env())
tokens, hooks, out = TokenStore(api.store.engine), api.webhooks(), {}
for account, spec in plan.items():
    made = out[account] = {"hooks": [], "secrets": []}
    if spec.get("token"):
        made["token"] = tokens.create(account_id=account, now_ms=api.clock())[0]
    for _ in range(spec.get("hooks", 0)):
        added = hooks.add(account_id=account, url=spec["url"])
        made["hooks"].append(added.endpoint.id)
        made["secrets"].append(added.secret)
    with api.store.engine.begin() as conn:
        for n in range(spec.get("events", 0)):
            emit(conn, account_id=account, kind="export.paused", data={"n": n}, now_ms=api.clock())
print(json.dumps(out))
api.close()
"""


class Account(TypedDict, total=False):
    """What one account gets: an API token, ``hooks`` webhooks to ``url``, then ``events`` events
    in the outbox (one delivery each per webhook, due at once)."""

    token: bool
    url: str
    hooks: int
    events: int


def seqexport_env(code: Path, home: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` plus what a process of the revision at ``code`` needs: its tree on ``PYTHONPATH``,
    ``SEQEXPORT_HOME``, a fresh secret key, and loopback receivers allowed."""
    from seqexport_dagster.store.crypto import new_key_spec

    return base | {
        "SEQEXPORT_HOME": str(home),
        "SEQEXPORT_SECRET_KEYS": new_key_spec("bench"),
        "SEQEXPORT_ALLOW_LOCAL": "1",
        "PYTHONPATH": str(code),
    }


def prepare(code: Path, env: dict[str, str], plan: dict[str, Account]) -> dict[str, dict[str, Any]]:
    """Sets up ``plan`` (account id → `Account`) with the revision's code; per account its
    ``token`` (if asked), webhook ``hooks`` ids and their ``secrets``."""
    done = subprocess.run(
        [sys.executable, "-c", _PREPARE, json.dumps(plan)],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"preparing the control plane of {code} failed:\n{done.stderr[-2000:]}")
    made: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return made
