"""Wrong values through `seqexport`: each gets its own message and exit code, and nothing changes.

Also: no command ever prints a secret, in people's output, ``--json`` output or errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from seqexport_dagster_tests.support.cli_harness import (  # noqa: F401
    Cli,
    control_plane_rows,
    files_under,
    run_fixture,
    run_sqlite_fixture,
)
from seqexport_dagster_tests.support.moto_server import MotoServer, free_port

S3 = ("create", "--account", "acme", "--bucket", "acme-exports", "--region", "us-east-1")
KEY = ("--access-key-id", "AKIAEXAMPLE000000001")
GOOD = (*KEY, "--secret-env", "GOOD_SECRET")
UNKNOWN = "exp_0000000000000000"

# (case id, argv with {A} active / {P} paused / {D} deleted export ids, env changes, stdin, exit code, message)
CASES: list[tuple[str, tuple[str, ...], dict[str, str | None], str, int, str]] = [
    ("unknown dataset", (*S3, *GOOD, "--datasets", "email_events,clicks"), {}, "", 2,
     "dataset: 'clicks' is not one of email_events, sms_events, custom_events, subscribers"),
    ("no dataset", (*S3, *GOOD, "--datasets", ","), {}, "", 2,
     "datasets: give at least one of email_events, sms_events, custom_events, subscribers"),
    ("bad frequency", (*S3, *GOOD, "--frequency", "2h"), {}, "", 2, "frequency: '2h' is not one of 15m, 1h, 6h, 24h"),
    ("bad bucket name", ("create", "--account", "acme", "--bucket", "Acme_Exports", "--region", "us-east-1", *GOOD),
     {}, "", 2, "bucket: 'Acme_Exports' is not a valid bucket name: use 3-63 characters"),
    ("bucket like an IP", ("create", "--account", "acme", "--bucket", "192.168.1.1", "--region", "us-east-1", *GOOD),
     {}, "", 2, "bucket: '192.168.1.1' is not a valid bucket name: it may not look like an IP address"),
    ("prefix with ..", (*S3, *GOOD, "--prefix", "sequenzy/../other"), {}, "", 2,
     "prefix: 'sequenzy/../other' is not a valid prefix: it may not contain '.' or '..' segments"),
    ("prefix with leading /", (*S3, *GOOD, "--prefix", "/sequenzy"), {}, "", 2,
     "prefix: '/sequenzy' is not a valid prefix: it may not start with '/'"),
    ("http endpoint without operator setting", (*S3, *GOOD, "--endpoint", "http://minio.example.com:9000"),
     {"SEQEXPORT_ALLOW_LOCAL": None}, "", 2,
     "endpoint: 'http://minio.example.com:9000' uses http://; only https:// is accepted"),
    ("loopback endpoint without operator setting", (*S3, *GOOD, "--endpoint", "http://127.0.0.1:9000"),
     {"SEQEXPORT_ALLOW_LOCAL": None}, "", 2, "endpoint: 'http://127.0.0.1:9000' uses http://"),
    ("IP literal endpoint", (*S3, *GOOD, "--endpoint", "https://2130706433"), {"SEQEXPORT_ALLOW_LOCAL": None}, "", 2,
     "endpoint: 'https://2130706433' is an IP address literal"),
    ("internal endpoint", (*S3, *GOOD, "--endpoint", "https://localhost:9000"), {"SEQEXPORT_ALLOW_LOCAL": None}, "",
     2, "endpoint: 'localhost' is a local or internal name"),
    ("endpoint with a path", (*S3, *GOOD, "--endpoint", "https://r2.example.com/bucket"), {}, "", 2,
     "endpoint: 'https://r2.example.com/bucket' has a path ('/bucket')"),
    ("missing secret", (*S3, *KEY), {}, "", 2,
     "secret: the secret access key is missing: give --secret-stdin (pipe it in), --secret-env NAME"),
    ("secret env unset", (*S3, *KEY, "--secret-env", "NO_SUCH_VARIABLE"), {}, "", 2,
     "secret: the environment variable given with --secret-env is not set or empty"),
    ("empty secret on stdin", (*S3, *KEY, "--secret-stdin"), {}, "\n", 2, "secret: --secret-stdin read an empty line"),
    ("two secret sources", (*S3, *GOOD, "--secret-stdin"), {}, "x\n", 2,
     "secret: give --secret-stdin or --secret-env, not both"),
    ("unknown provider", (*S3, *GOOD, "--provider", "ftp"), {}, "", 2, "provider: 'ftp' is not one of s3, gcs, azure (for R2"),
    ("local folders without operator setting",
     ("create", "--account", "acme", "--provider", "local", "--bucket", "/tmp/x"), {"SEQEXPORT_ALLOW_LOCAL": None},
     "", 2, "provider: 'local' is not one of s3, gcs, azure (for R2, MinIO or B2 choose s3 and set the endpoint)"),
    ("missing region", ("create", "--account", "acme", "--bucket", "acme-exports", *GOOD), {}, "", 2,
     "region: is required for Amazon S3 (for example us-east-1)"),
    ("bad region", ("create", "--account", "acme", "--bucket", "acme-exports", "--region", "mars-1", *GOOD), {}, "", 2,
     "region: 'mars-1' is not an AWS region name"),
    ("gcs with an endpoint", (*S3, *GOOD, "--provider", "gcs", "--endpoint", "https://r2.example.com"), {}, "", 2,
     "endpoint: gcs always uses https://storage.googleapis.com; leave it empty"),
    ("missing access key id", (*S3, "--secret-env", "GOOD_SECRET"), {}, "", 2, "access_key_id: is required"),
    ("bad account", ("create", "--account", "acme corp", "--bucket", "acme-exports", "--region", "us-east-1", *GOOD),
     {}, "", 2, "account: 'acme corp' is not an account id"),
    ("lag out of range", (*S3, *GOOD, "--lag-minutes", "90"), {}, "", 2, "lag: 90 minutes is out of range"),
    ("lag not a number", (*S3, *GOOD, "--lag-minutes", "soon"), {}, "", 2, "lag: 'soon' is not a number of minutes"),
    ("missing --bucket", ("create", "--account", "acme"), {}, "", 2,
     "the following arguments are required: --bucket"),
    ("unknown command", ("launch",), {}, "", 2, "argument COMMAND: invalid choice: 'launch'"),
    ("unknown option", ("status", "{A}", "--verbose"), {}, "", 2, "unrecognized arguments: --verbose"),
    ("unknown export id", ("status", UNKNOWN), {}, "", 3, f"export {UNKNOWN!r} not found"),
    ("pause unknown export", ("pause", UNKNOWN), {}, "", 3, f"export {UNKNOWN!r} not found"),
    ("history of unknown export", ("history", UNKNOWN), {}, "", 3, f"export {UNKNOWN!r} not found"),
    ("destination of unknown export", ("destination", UNKNOWN, "--prefix", "x"), {}, "", 3,
     f"export {UNKNOWN!r} not found"),
    ("malformed export id", ("status", "../etc"), {}, "", 2, "export_id: '../etc' is not an export id"),
    ("dataset already exported", ("datasets", "add", "{A}", "email_events"), {}, "", 4,
     "already exports email_events"),
    ("dataset not exported", ("datasets", "remove", "{A}", "custom_events"), {}, "", 4,
     "does not export custom_events"),
    ("removing every dataset", ("datasets", "remove", "{A}", "email_events,sms_events"), {}, "", 4,
     "would have no dataset left; keep at least one, or delete the export"),
    ("adding an unknown dataset", ("datasets", "add", "{A}", "opens"), {}, "", 2, "dataset: 'opens' is not one of"),
    ("unknown datasets action", ("datasets", "rename", "{A}", "x"), {}, "", 2,
     "argument action: invalid choice: 'rename'"),
    ("destination without change", ("destination", "{A}"), {}, "", 2, "destination: nothing to change"),
    ("destination with a bad prefix", ("destination", "{A}", "--prefix", "a//b"), {}, "", 2,
     "prefix: 'a//b' is not a valid prefix: it may not contain empty segments ('//')"),
    ("new key without its secret",
     ("destination", "{A}", "--provider", "s3", "--bucket", "acme-exports", "--region", "us-east-1", *KEY), {}, "", 2,
     "secret: the secret access key is missing"),
    ("export now while paused", ("export-now", "{P}"), {}, "", 4, "is paused, so export now would run nothing; resume"),
    ("pause a deleted export", ("pause", "{D}"), {}, "", 4, "is deleted; pause is not possible"),
    ("resume a deleted export", ("resume", "{D}"), {}, "", 4, "is deleted; resume is not possible"),
    ("delete twice", ("delete", "{D}", "--yes"), {}, "", 4, "is already deleted; nothing changed"),
    ("datasets of a deleted export", ("datasets", "add", "{D}", "custom_events"), {}, "", 4,
     "is deleted; changing datasets is not possible"),
    ("move a deleted export", ("destination", "{D}", "--prefix", "x"), {}, "", 4,
     "is deleted; changing the destination is not possible"),
    ("bad secret keys setting", ("list",), {"SEQEXPORT_SECRET_KEYS": "k1:not-base64!"}, "", 6,
     "SEQEXPORT_SECRET_KEYS: key 'k1' is not valid base64"),
    ("control plane away", ("list",), {"SEQEXPORT_DATABASE_URL": "postgresql+psycopg2://postgres@127.0.0.1:1/x"}, "",
     6, "control-plane database unavailable at postgresql+psycopg2://postgres@127.0.0.1:1/x ("),
    ("bad database URL", ("list",), {"SEQEXPORT_DATABASE_URL": "nosuchdb://user:hunter2@db/x"}, "", 6,
     "SEQEXPORT_DATABASE_URL is not a usable database URL"),
]  # fmt: skip


def setup_exports(run: Cli) -> dict[str, str]:
    active = run.create_local("a", "--datasets", "email_events,sms_events")["id"]
    paused = run.create_local("p")["id"]
    run.ok("pause", paused)
    deleted = run.create_local("d")["id"]
    run.ok("delete", deleted, "--yes")
    return {"A": active, "P": paused, "D": deleted}


def test_bad_inputs_change_nothing(run: Cli) -> None:
    ids = setup_exports(run)
    before = control_plane_rows(run.world.control_engine)
    files = files_under(run.world.root)
    seen: dict[str, str] = {}
    for case, argv, env_changes, stdin, code, message in CASES:
        if run.remote and any(k.startswith("SEQEXPORT_") for k in env_changes):
            continue  # server-side settings: the remote CLI's server keeps its own (the local runs cover them)
        env: dict[str, Any] = {**run.env, "GOOD_SECRET": "good-secret-value", **env_changes}
        env = {k: v for k, v in env.items() if v is not None}
        args = [a.format(**ids) for a in argv]
        for as_json in (False, True):
            result = run(*args, *(["--json"] if as_json else []), stdin=stdin, env=env)
            assert result.code == code, (case, result)
            assert "Traceback" not in result.err + result.out, case
            if as_json:
                error = result.json["error"]
                assert error["exit_code"] == code and message in error["message"], (case, error)
                if code == 2 and ":" in message and not message.startswith(("the following", "argument", "unrec")):
                    assert error["field"] == message.split(":")[0], (case, error)
            else:
                assert result.out == "" and result.err.startswith("error: ") and message in result.err, (case, result)
                assert result.err.count("\n") == 1, (case, result.err)  # one line, never a dump
                seen.setdefault(result.err, case)
        assert control_plane_rows(run.world.control_engine) == before, case
        assert files_under(run.world.root) == files, case
    assert "hunter2" not in "".join(c.err + c.out for c in run.calls)
    # Each different wrong value gets a message of its own (the unknown-id cases share one on purpose).
    ran = [c for c in CASES if not (run.remote and any(k.startswith("SEQEXPORT_") for k in c[2]))]
    assert len(seen) >= len(ran) - 5


PLANTED = "PLANTED-s3cr3t-7f3a9c1e5b"


def test_a_secret_given_to_secret_env_is_not_echoed_even_when_shaped_like_a_name(run_sqlite: Cli) -> None:
    """People paste the secret itself after --secret-env; an upper-case key looks like a variable name."""
    pasted = "WJALRXUTNFEMIK7MDENGBPXRFICYEXAMPLEKEY00"
    result = run_sqlite(*S3, *KEY, "--secret-env", pasted, "--json")
    assert result.code == 2 and result.json["error"]["field"] == "secret"
    assert pasted not in result.out + result.err and pasted[:12] not in result.out + result.err


def test_secret_is_never_printed(run_sqlite: Cli, moto: MotoServer) -> None:
    run = run_sqlite  # the database backend plays no part here; the table above runs on both
    bucket = "planted-secret-test"
    moto.admin_client().create_bucket(Bucket=bucket)
    env = {**run.env, "PLANTED": PLANTED}
    dead = f"http://127.0.0.1:{free_port()}"
    base = ("create", "--account", "acme", "--bucket", bucket, "--endpoint", moto.endpoint, *KEY)
    first = run(*base, "--secret-stdin", "--json", stdin=PLANTED + "\n")
    assert "id" in first.json, first
    eid = first.json["id"]
    other = run(*base, "--secret-env", "PLANTED", env=env)
    assert other.code == 0, other
    for as_json in ((), ("--json",)):
        commands: list[tuple[tuple[str, ...], str]] = [
            (("list", "--all"), ""),
            (("status", eid), ""),
            (("history", eid), ""),
            (("pause", eid), ""),
            (("resume", eid), ""),
            (("export-now", eid), ""),
            (("datasets", "remove", eid, "sms_events"), ""),
            (("datasets", "add", eid, "sms_events"), ""),
            (("destination", eid, "--prefix", f"moved{len(as_json)}"), ""),
            (("destination", eid, "--bucket", "no-such-bucket-anywhere"), ""),
            (("destination", eid, "--secret-stdin"), PLANTED + "\n"),
            (("destination", eid, "--secret-stdin", "--bucket", "Bad_Bucket"), PLANTED + "\n"),
            ((*base, "--secret-env", "PLANTED", "--bucket", "no-such-bucket-anywhere"), ""),
            (("rotate-keys",), ""),
        ]
        for argv, stdin in commands:
            run(*argv, *as_json, stdin=stdin, env=env)
    # An unreachable endpoint costs the client's retries: once each way is enough.
    run("destination", eid, "--secret-stdin", "--endpoint", dead, stdin=PLANTED + "\n", env=env)
    run(*base, "--secret-stdin", "--endpoint", dead, "--json", stdin=PLANTED + "\n", env=env)
    codes = [c.code for c in run.calls]
    assert 0 in codes and 5 in codes and 2 in codes  # successes, refused connection tests and bad input
    failures = [c for c in run.calls if c.code == 5]
    assert any("bucket no-such-bucket-anywhere does not exist" in c.err + c.out for c in failures)
    assert any("cannot reach" in c.err + c.out for c in failures)
    for call in run.calls:
        assert PLANTED not in call.out and PLANTED not in call.err, call
    assert PLANTED not in repr(control_plane_rows(run.world.control_engine))  # sealed at rest


def test_internal_error_is_one_line_without_its_text(run_sqlite: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    eid = run_sqlite.create_local()["id"]

    def broken(self: object, export_id: str) -> None:
        raise ValueError(f"boom with {PLANTED}")

    monkeypatch.setattr("seqexport_dagster.management.api.Exports.status", broken)
    result = run_sqlite("status", eid)
    assert result.code == 1 and result.out == ""
    assert (
        result.err
        == f"error: internal error ValueError at {Path(__file__).name}:{broken.__code__.co_firstlineno + 1}; please report it\n"
    )
    assert run_sqlite("status", eid, "--json").json["error"]["type"] == "internal"


@pytest.mark.parametrize("flag", ["--secret", "--secret-access-key", "--password"])
def test_secret_is_never_a_command_line_option(run_sqlite: Cli, flag: str) -> None:
    result = run_sqlite(*S3, *KEY, flag, PLANTED)
    assert result.code == 2 and f"unrecognized arguments: {flag}; a secret is never a command-line value" in result.err
    assert PLANTED not in result.err + result.out
