"""The README's first command (`make demo`): `seqexport demo` builds, exports and prints a usable summary."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb

from seqexport_dagster import cli
from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.demo.run import DemoSummary
from seqexport_dagster_tests.support.layout import check_layout


def test_demo_exports_a_valid_layout_that_duckdb_reads(tmp_path, capsys):
    dest = tmp_path / "acme-bucket"
    assert cli.main(["demo", "--home", str(tmp_path / "demo"), "--dest-dir", str(dest), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)

    assert [e["account_id"] for e in summary["exports"]] == ["acme", "globex"]
    assert summary["exports"][0]["root"] == str(dest)
    assert summary["rows"] > 5_000 and summary["files"] >= 8

    for export in summary["exports"]:
        problems = check_layout(tmp_path / export["root"])
        assert problems == [], problems

    # --dest-dir is the root of the first account's export.
    # (plus _sequenzy/, outside every dataset folder: the window manifests.)
    assert sorted(p.name for p in dest.iterdir() if not p.name.startswith(".")) == [
        "_sequenzy",
        "custom_events",
        "email_events",
        "sms_events",
        "subscribers",
    ]
    assert list(dest.glob("subscribers/date=*/_SUCCESS"))
    # A day's snapshot never holds a change from after that day (the generator writes no future).
    for part in dest.glob("subscribers/date=*/subscribers-*.jsonl.gz"):
        next_day = (dt.date.fromisoformat(part.parent.name.removeprefix("date=")) + dt.timedelta(days=1)).isoformat()
        rows = [json.loads(line) for line in gzip.decompress(part.read_bytes()).splitlines()]
        assert rows and all(r["updated_at"] < next_day for r in rows), part

    # The customer docs' DuckDB query, on the demo's files, counts what the source holds between the
    # start of the chain and the end of the last exported window.
    exported = duckdb.sql(summary["duckdb_query"]).fetchall()
    # The printed command runs as printed (issue 42: nothing said how to run the query).
    shown = subprocess.run(shlex.split(summary["duckdb_commands"][0]), capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert all(event_type in shown.stdout for event_type, _ in exported)
    bounds = [p.name.split("-")[1:3] for p in dest.glob("email_events/date=*/*.jsonl.gz")]
    first_from_ms, last_to_ms = min(int(b[0]) for b in bounds), max(int(b[1]) for b in bounds)
    source = sqlite3.connect(tmp_path / "demo" / "source.db")
    expected = source.execute(
        "SELECT event_type, count(DISTINCT id) FROM email_events WHERE account_id = 'acme' "
        "AND recorded_at > ? AND recorded_at <= ? GROUP BY event_type",
        (iso_ms(first_from_ms), iso_ms(last_to_ms)),
    ).fetchall()
    assert dict(exported) == dict(expected)


def test_the_printed_browse_command_works_from_any_folder(tmp_path, monkeypatch):
    """`dg dev` on the demo's instance: absolute paths only, nothing relative to the checkout."""
    monkeypatch.chdir(tmp_path)
    summary = DemoSummary(home=Path("demo"), dagster_home=Path("demo") / "dagster_home")
    command = summary.browse_command()
    words = shlex.split(command.replace("\\\n", " "))
    env = dict(w.split("=", 1) for w in words[:3])
    assert env == {
        "SEQEXPORT_HOME": str(tmp_path / "demo"),
        "SEQEXPORT_ALLOW_LOCAL": "1",
        "DAGSTER_HOME": str(tmp_path / "demo" / "dagster_home"),
    }
    dg, dev, flag, workspace = words[3:7]
    assert (Path(dg).is_absolute() and Path(dg).is_file(), dev) == (True, "dev")
    assert (
        flag == "-w"
        and Path(workspace).is_absolute()
        and Path(workspace).read_text().count("seqexport_dagster.definitions")
    )
    assert "dagster dev" not in command and words[-4:] == ["-h", "127.0.0.1", "-p", "3000"]


def test_demo_instance_takes_everything_but_its_storage_from_dagster_yaml(tmp_path):
    """The demo's instance has the repository's run queue and limits: dagster.yaml is the one source."""
    from pathlib import Path

    import yaml

    from seqexport_dagster.demo.run import INSTANCE_YAML, demo_instance_yaml

    assert INSTANCE_YAML == Path(__file__).resolve().parents[1] / "deploy" / "dagster.yaml"
    repo = yaml.safe_load(INSTANCE_YAML.read_text())
    demo = yaml.safe_load(demo_instance_yaml(tmp_path / "dagster_home"))
    assert demo["event_log_storage"]["class"] == "ConsolidatedSqliteEventLogStorage"
    assert {k: v for k, v in demo.items() if not k.endswith("_storage")} == {
        k: v for k, v in repo.items() if k != "storage"
    }


def test_the_demo_of_the_checkout_says_make_dev(tmp_path, capsys):
    """The checkout's own `.demo` is what `make dev` opens: the demo prints that, not the long line;
    a demo elsewhere still gets the full `dg dev` command (issue 25)."""
    from seqexport_dagster.cli import render
    from seqexport_dagster.demo.run import DemoExport

    checkout = Path(__file__).resolve().parents[1]
    exports = [DemoExport("acme", "exp_0123456789abcdef", checkout / ".demo" / "acme")]
    ours = DemoSummary(checkout / ".demo", exports, runs=3, dagster_home=checkout / ".demo" / "dagster_home")
    render.demo_summary(ours, None)
    printed = capsys.readouterr().out
    assert f"  make dev      # in {checkout}; then open http://127.0.0.1:3000" in printed
    assert "dg dev" not in printed and "DAGSTER_HOME=" not in printed
    elsewhere = DemoSummary(home=tmp_path / "demo", dagster_home=tmp_path / "demo" / "dagster_home")
    assert elsewhere.browse_hint() == elsewhere.browse_command() and " dev -w " in elsewhere.browse_hint()


def test_loading_the_definitions_shows_no_beta_warning(tmp_path):
    """Issue 42: a Dagster `BetaWarning` about sensors' ``owners`` (a parameter we never pass) was
    printed by every demo and 23 times an hour by `make dev`. Loaded as Dagster loads them, in a
    fresh process where every warning is shown, the definitions print none."""
    code = (
        "import datetime as dt, warnings\n"
        "warnings.simplefilter('always')\n"
        "from seqexport_dagster.definitions import build_definitions\n"
        "build_definitions(first_day=dt.date(2026, 9, 30)).get_repository_def()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEQEXPORT_", "DAGSTER_"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    env["SEQEXPORT_HOME"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "BetaWarning" not in result.stderr, result.stderr
