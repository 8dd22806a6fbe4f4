"""`seqexport verify` bounded on Parquet parts and on manifests (issue 41), and malformed manifests.

The review of bfe50bc: a 21 KB Parquet part of 1 M rows took verify to 777 MB (6 M rows: out of
memory), a 31 KB zstd part claiming 944 MB to 2.96 GB; an endless manifest listing ignored
``--max-objects`` (550,000 keys after 300 s), three 64 MiB manifests took 2.3 GB; a manifest without
``chain_from_ms`` or with a part entry without ``key`` crashed verify ("internal error", exit 1).
Each case runs the real CLI in a process of its own (`support.measured_cli`) on a planted local
folder (`support.hostile_objects`) or a hostile S3 server (`support.hostile_bucket`), and asserts
the exit code, the problem and the peak RSS (at most 200 MB, as docs/customers.md promises).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from seqexport_dagster.contract.keys import manifest_key, part_key
from seqexport_dagster.delivery.manifest import ManifestPart, manifest_body
from seqexport_dagster_tests.support import hostile_bucket, hostile_objects
from seqexport_dagster_tests.support.measured_cli import Measured, run_measured

MAX_RSS_MB = 200
READ_KEY = ("--access-key-id", "reader", "--secret-env", "READ_SECRET")
ENV = {"READ_SECRET": "read-secret-value"}


def found(result: Measured) -> list[dict[str, Any]]:
    report = json.loads(result.out)
    assert report["ok"] is False, report
    problems: list[dict[str, Any]] = report["problems"]
    return problems


@pytest.mark.parametrize(
    ("plant", "kind", "detail"),
    [
        (hostile_objects.million_rows, "too_many_lines", "its footer claims 1,000,000 rows; the limit is 50,000"),
        (hostile_objects.claimed_bomb, "too_large", "its footer claims a row group of 943,"),
        (hostile_objects.dictionary_bomb, "too_large", "has a row of 1,048,"),
    ],
    ids=["1M-rows", "zstd-claims-944MB", "dictionary-expands-to-944MB"],
)
def test_a_hostile_objects_part_is_one_problem_within_200_mb(
    tmp_path: Path, plant: Any, kind: str, detail: str
) -> None:
    path = plant(tmp_path)
    assert path.stat().st_size < 64_000, "small on disk"
    result = run_measured(["verify", str(tmp_path), "--json"])
    assert result.code == 7, result
    (problem,) = found(result)
    assert (problem["kind"], problem["key"]) == (kind, hostile_objects.KEY)
    assert detail in problem["detail"], problem
    assert result.peak_rss_mb <= MAX_RSS_MB, result
    assert result.seconds < 30, result


@pytest.mark.slow
def test_an_endless_manifest_listing_stops_at_max_objects() -> None:
    with hostile_bucket.running("manifestlist") as bucket:
        argv = ["verify", bucket.source, "--endpoint", bucket.endpoint, *READ_KEY, "--json", "--max-objects", "20000"]
        result = run_measured(argv, env=ENV, timeout=120)
    assert result.code == 2, result
    error = json.loads(result.out)["error"]
    assert error["field"] == "max_objects"
    assert "holds more than 20,000 objects, window manifests (_sequenzy/manifests/) included" in error["message"]
    assert result.peak_rss_mb <= MAX_RSS_MB, result


@pytest.mark.slow
def test_manifests_past_their_size_bound_are_refused_unread() -> None:
    with hostile_bucket.running("bigmanifest") as bucket:
        argv = ["verify", bucket.source, "--endpoint", bucket.endpoint, *READ_KEY, "--json"]
        result = run_measured(argv, env=ENV, timeout=120)
    assert result.code == 7, result
    problems = found(result)
    bad = [p for p in problems if p["kind"] == "bad_manifest"]
    assert len(bad) == 3 and all("the bound is 1 MiB, not read" in p["detail"] for p in bad), problems
    assert result.peak_rss_mb <= MAX_RSS_MB and result.seconds < 30, result


def test_malformed_manifests_are_bad_manifest_problems_beside_every_other_problem(tmp_path: Path) -> None:
    """Five windows with their parts and manifests; four manifests broken as the review broke them.
    Each is a ``bad_manifest`` naming its field (exit 7), and the rest of the report is still there."""
    hostile_objects.malformed_manifests(tmp_path)
    result = run_measured(["verify", str(tmp_path), "--json"])
    assert result.code == 7, result
    problems = found(result)
    bad = {p["key"].rsplit("/", 1)[-1]: p["detail"] for p in problems if p["kind"] == "bad_manifest"}
    name = "email_events-{}-{}-through-0000.json"
    assert bad == {
        name.format(
            hostile_objects.hour(1).from_ms, hostile_objects.hour(1).to_ms
        ): "not a manifest: Object missing required field `chain_from_ms`",
        name.format(
            hostile_objects.hour(2).from_ms, hostile_objects.hour(2).to_ms
        ): "not a manifest: Expected `int`, got `str` - at `$.chain_from_ms`",
        name.format(
            hostile_objects.hour(3).from_ms, hostile_objects.hour(3).to_ms
        ): "not a manifest: Object missing required field `key` - at `$.parts[0]`",
        name.format(
            hostile_objects.hour(4).from_ms, hostile_objects.hour(4).to_ms
        ): "not a manifest: Object missing required field `bytes` - at `$.parts[0]`",
    }, problems
    kinds = sorted(p["kind"] for p in problems)
    assert kinds == ["bad_manifest"] * 4 + ["no_manifest"] * 4 + ["unexpected_object"], problems


def test_a_manifest_naming_thousands_of_absent_parts_is_aggregated(tmp_path: Path) -> None:
    """Problems multiply under manifests (200,000 of them, each naming thousands of parts): past
    1,000 of a kind per dataset they are counted in one entry, not listed."""
    window = hostile_objects.hour(0)
    key = part_key("", "email_events", window, 0)
    (tmp_path / key).parent.mkdir(parents=True)
    (tmp_path / key).write_bytes(gzip.compress(b""))
    parts = [ManifestPart(part_key("", "email_events", window, n), n, 0, 20, None) for n in range(3_000)]
    target = tmp_path / manifest_key("", "email_events", window, 2_999)
    target.parent.mkdir(parents=True)
    target.write_bytes(manifest_body("email_events", window, window.from_ms, parts))
    assert target.stat().st_size < 1024 * 1024
    result = run_measured(["verify", str(tmp_path), "--json"])
    assert result.code == 7, result
    problems = found(result)
    missing = [p for p in problems if p["kind"] == "missing_part"]
    assert len(missing) == 1_001 and sum(p["count"] for p in missing) == 2_999, missing[-1]  # parts 1..2999
    assert missing[-1]["detail"] == "1,999 more like the above, not listed"
