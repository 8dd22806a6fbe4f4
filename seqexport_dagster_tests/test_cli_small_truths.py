"""Issue 42 item 5: the small untruths of the CLI, each checked through the real `seqexport`.

A key rotation is not a move; a frequency that is already set changes nothing; a deleted export is
"already deleted"; an account token's `rotate-keys` says it needs an operator token; an `http://`
endpoint's refusal names SEQEXPORT_ALLOW_LOCAL; `list` shows each export's format; and a secret
that is an ordinary word is redacted everywhere except inside our own fixed wording.
"""

from __future__ import annotations

from typing import Any

import pytest

from seqexport_dagster.destination.redaction import redact_secrets
from seqexport_dagster_tests.support.api_server import mint
from seqexport_dagster_tests.support.cli_harness import Cli, remote_env, run_sqlite_fixture  # noqa: F401 - fixture
from seqexport_dagster_tests.support.moto_server import MotoServer


def _s3(bucket: str, moto: MotoServer) -> tuple[str, ...]:
    return ("--provider", "s3", "--bucket", bucket, "--region", "us-east-1", "--endpoint", moto.endpoint)


def test_a_secret_that_is_a_word_is_kept_in_our_wording_and_redacted_everywhere_else() -> None:
    text = "testing the connection: writing a test file to s3://b/p ... store said: key testing refused"
    assert redact_secrets(text, ["testing"]) == (
        "testing the connection: writing a test file to s3://b/p ... store said: key *** refused"
    )
    # The old behaviour stays for everything that is not our exact wording.
    assert redact_secrets("Testing the connection with testing", ["testing"]) == "Testing the connection with ***"
    assert redact_secrets("a=wJalr/XUtn+FEMI b", ["wJalr/XUtn+FEMI"]) == "a=*** b"


def test_the_connection_test_progress_keeps_its_words_when_the_secret_is_one(run_sqlite: Cli, moto: MotoServer) -> None:
    moto.admin_client().create_bucket(Bucket="word-secret")
    env = {**run_sqlite.env, "WORD": "testing"}
    result = run_sqlite(
        "create", "--account", "acme", *_s3("word-secret", moto), "--access-key-id", "AKIAWORDSECRET0001",
        "--secret-env", "WORD", env=env,
    )  # fmt: skip
    assert result.code == 0, result
    assert "testing the connection" in result.err and "*** the connection" not in result.err


def test_http_endpoint_refusal_names_seqexport_allow_local(run_sqlite: Cli) -> None:
    env = {k: v for k, v in run_sqlite.env.items() if k != "SEQEXPORT_ALLOW_LOCAL"}
    env["S"] = "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY"
    result = run_sqlite(
        "create", "--json", "--account", "acme", "--bucket", "acme-exports", "--region", "us-east-1",
        "--endpoint", "http://minio.example.com:9000", "--access-key-id", "AKIAIOSFODNN7EXAMPLE", "--secret-env", "S",
        env=env,
    )  # fmt: skip
    assert result.code == 2, result
    error = result.json["error"]
    assert error["field"] == "endpoint" and "SEQEXPORT_ALLOW_LOCAL=1" in error["message"]


def test_frequency_already_set_says_nothing_changed(run_sqlite: Cli) -> None:
    eid = run_sqlite.create_local("bucket", "--frequency", "15m")["id"]
    same = run_sqlite("frequency", eid, "15m")
    assert same.code == 0 and "already runs every 15m; nothing changed" in same.out, same
    other = run_sqlite("frequency", eid, "1h")
    assert other.code == 0 and "now runs every 1h" in other.out, other


def test_delete_of_a_deleted_export_says_it_is_already_deleted(run_sqlite: Cli) -> None:
    eid = run_sqlite.create_local()["id"]
    assert run_sqlite("delete", eid, "--yes").code == 0
    again = run_sqlite("delete", eid, "--yes")
    assert again.code != 0 and "already deleted" in again.err + again.out, again
    assert "create a new export" not in again.err + again.out


def test_list_shows_each_exports_format(run_sqlite: Cli) -> None:
    run_sqlite.create_local("a")
    run_sqlite.create_local("b", "--format", "parquet")
    listing = run_sqlite("list")
    header, *rows = listing.out.splitlines()
    assert "FORMAT" in header.split()
    assert sorted(r.split()[4] for r in rows if r.startswith("exp_")) == ["jsonl.gz", "parquet"]


@pytest.mark.slow
def test_remote_key_rotation_and_account_token_messages(run_sqlite: Cli, moto: MotoServer) -> None:
    moto.admin_client().create_bucket(Bucket="rotation-message")
    w = run_sqlite.world
    with remote_env(w, run_sqlite.key_spec) as env:
        remote = Cli(w, {**env, "K1": "secret-one-0000000000", "K2": "secret-two-0000000000"}, run_sqlite.key_spec,
                     run_sqlite.capsys, run_sqlite.monkeypatch, remote=True)  # fmt: skip
        created = remote(
            "create", "--json", "--account", "acme", *_s3("rotation-message", moto),
            "--access-key-id", "AKIAROTATION000001", "--secret-env", "K1",
        )  # fmt: skip
        assert created.code == 0, created
        eid = created.json["id"]
        rotated = remote("destination", eid, "--access-key-id", "AKIAROTATION000002", "--secret-env", "K2")
        assert rotated.code == 0, rotated
        assert "new destination" not in rotated.err + rotated.out
        assert "now writes with the new credentials" in rotated.err, rotated

        from seqexport_dagster.destination.policy import OperatorPolicy
        from seqexport_dagster.management.api import Exports

        account: dict[str, Any] = {
            **env,
            "SEQEXPORT_API_TOKEN": mint(Exports(w.store, OperatorPolicy(), clock=w.clock), "acme"),
        }
        refused = remote("rotate-keys", env=account)
        assert refused.code != 0
        assert "operator token" in refused.err, refused
