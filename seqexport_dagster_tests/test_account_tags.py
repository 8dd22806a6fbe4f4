"""Issue 25, "observations and run tags carry the account", on a real Dagster instance.

- a run launched by hand or by a backfill names its exports and accounts in its tags as the
  scheduler's runs do, and stays bounded however many exports it carries;
- each dataset's observation of the run counts its accounts and names the failing ones;
- ``export_status``'s observations name the account of their export.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from seqexport_dagster.contract.window import DAY_MS, HOUR_MS, MINUTE_MS
from seqexport_dagster.delivery.run_tags import NAMED_IN_TAGS
from seqexport_dagster.demo.generator import Scale, generate_account
from seqexport_dagster_tests.support.dagster_harness import Harness, harness
from seqexport_dagster_tests.support.world import DAY0

D0 = "2026-09-30"
OURS = ("account/", "export/", "shard/", "seqexport/")


@pytest.fixture
def h(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    with harness(tmp_path, monkeypatch) as value:
        yield value


def our_tags(run: Any) -> dict[str, str]:
    return {k: v for k, v in run.tags.items() if k.startswith(OURS)}


def test_manual_and_backfill_runs_carry_their_accounts_bounded_and_observations_name_them(h: Harness) -> None:
    accounts = [f"acct{i}" for i in range(NAMED_IN_TAGS + 2)]
    for account in accounts:
        generate_account(h.world.source_engine, account, DAY0, DAY0 + DAY_MS, scale=Scale(5, 5, 1, 1))
    exports = [h.world.local_export(a, datasets=("email_events",), frequency="1h", folder=f"b_{a}") for a in accounts]
    blocked = h.world.root / "blocked"
    blocked.write_text("a file where the bucket folder should be")
    bad = h.world.local_export("globex-failing", datasets=("email_events",), frequency="1h", folder="blocked")
    h.world.clock.now_ms = DAY0 + 3 * HOUR_MS + 3 * MINUTE_MS

    # By hand, two exports: each named, with its account.
    result = h.run([exports[0].id, bad.id], D0, ["email_events"])
    tags = our_tags(h.instance.get_run_by_id(result.run_id))
    assert tags["account/acct0"] == "yes" and tags["account/globex-failing"] == "yes", tags
    assert tags[f"export/{bad.id}"] == "yes" and tags["seqexport/accounts"] == "2" and tags["seqexport/exports"] == "2"
    (obs,) = [o for o in h.observations("email_events") if o.run_id == result.run_id]
    meta = obs.asset_observation.metadata
    assert meta["accounts"].value == 2 and meta["failing_accounts"].value == "globex-failing"
    assert f"{bad.id} (account globex-failing)" in meta["failed"].value

    # A backfill of every active export (no ids in its config): counts and shards, no names past the cap.
    result = h.run(None, D0, ["email_events"], tags={"dagster/backfill": "acct"})
    tags = our_tags(h.instance.get_run_by_id(result.run_id))
    assert tags["seqexport/accounts"] == str(len(accounts) + 1) and tags["seqexport/exports"] == str(len(exports) + 1)
    assert not [k for k in tags if k.startswith(("account/", "export/"))], tags
    assert len(tags) <= 2 * NAMED_IN_TAGS + len(exports) + 1 + 2
    assert any(k.startswith("shard/") for k in tags)

    # export_status's observations name each export's account.
    h.world.clock.now_ms = DAY0 + 4 * HOUR_MS + 3 * MINUTE_MS
    h.tick()
    h.tick()  # the first registers each export's partition, the second records it
    # First recorded by a materialization (issue 42); its partition names its account too.
    observed = {m.asset_materialization.partition: m.asset_materialization for m in h.materializations("export_status")}
    status = observed[f"globex-failing/{bad.id}"]
    assert status.metadata["account"].value == "globex-failing"
    assert status.description is not None and "(account globex-failing)" in status.description
    assert dg.AssetKey("export_status") == status.asset_key
