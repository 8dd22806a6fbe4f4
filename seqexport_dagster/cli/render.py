"""What the CLI prints: the output channel (which scrubs secrets), tables, and each command's view.

Results go to stdout (as JSON with ``--json``: the shapes are `seqexport_dagster.management.presentation`'s, the
same as the HTTP API's), progress and errors to stderr. Nothing here reads a database or a bucket.

Size: every printed shape of the CLI, grown by this round's commands (role setup, tokens' expiry,
format, escaping); to be split by audience (exports, tools) with issue 28's package moves.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.destination.config import GCS_ENDPOINT, describe_location
from seqexport_dagster.destination.encryption import describe_sse
from seqexport_dagster.destination.redaction import redact_secrets
from seqexport_dagster.errors import sanitize_error
from seqexport_dagster.management.terminal import escape, escape_lines

if TYPE_CHECKING:
    from seqexport_dagster.delivery.batch import BatchReport
    from seqexport_dagster.demo.run import DemoSummary
    from seqexport_dagster.management.history import RunHistory
    from seqexport_dagster.management.status import ExportNowPlan, ExportStatus
    from seqexport_dagster.store import ExportRecord, RotationReport
    from seqexport_dagster.store.token import ApiToken


class Output:
    """Prints results and errors; scrubs every secret the command has read from all of it."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.secrets: list[str] = []

    def scrub(self, text: str) -> str:
        # Whole secrets only (and their JSON-escaped form), never a substring of a longer word.
        return redact_secrets(text, self.secrets)

    # Our own newlines stay; any other control character (an escape sequence or CR from a key, a
    # name or a server's answer) is printed escaped (`terminal.escape_lines`). Values are escaped
    # whole, newlines included, where they are put into a line (`table`, `describe`).
    def line(self, text: str = "") -> None:
        print(escape_lines(self.scrub(text)), file=sys.stdout)

    def progress(self, text: str) -> None:
        print(escape_lines(self.scrub(text)), file=sys.stderr, flush=True)

    def json(self, value: object) -> None:
        print(self.scrub(json.dumps(value, indent=2)), file=sys.stdout)

    def error(self, kind: str, message: str, code: int, field: str | None = None) -> int:
        message = sanitize_error(message)
        if self.as_json:
            error: dict[str, object] = {"type": kind, "message": self.scrub(message), "exit_code": code}
            if field:
                error["field"] = field
            self.json({"error": error})
        else:
            print(f"error: {self.scrub(message)}", file=sys.stderr)
        return code


def shapes() -> ModuleType:
    """`seqexport_dagster.management.presentation`, the JSON shapes shared with the HTTP API.

    Imported late: it pulls in the API, SQLAlchemy and Alembic (about a second), and
    `seqexport --help` must not wait for them."""
    import seqexport_dagster.management.presentation as module

    return module


def mask_key_id(access_key_id: str | None) -> str | None:
    masked: str | None = shapes().mask_key_id(access_key_id)
    return masked


def export_json(e: ExportRecord) -> dict[str, object]:
    return dict(shapes().export_json(e))


def export_changed(out: Output, record: ExportRecord, sentence: str) -> None:
    """A changed export: its JSON shape, or one sentence saying what changed."""
    if out.as_json:
        out.json(export_json(record))
    else:
        out.line(sentence)


def when(ms: int | None) -> str:
    return "-" if ms is None else iso_ms(ms)[:19].replace("T", " ") + "Z"


def duration(ms: int) -> str:
    seconds = ms // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{n} B"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns for people; numbers right-aligned."""
    cells = [[str(c) for c in headers], *[["-" if c is None else escape(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], int) for row in rows) and bool(rows) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def where(e: ExportRecord) -> str:
    """The destination as a URL (``s3://bucket/prefix via endpoint``)."""
    # gs:// alone on Google's own endpoint; any other (an operator's loopback stand-in) is shown.
    endpoint = None if e.provider == "gcs" and e.endpoint in (None, GCS_ENDPOINT) else e.endpoint
    return describe_location(e.provider, e.bucket, e.prefix, endpoint)


def describe(out: Output, e: ExportRecord) -> None:
    rows = [
        ("export", e.id),
        ("account", e.account_id),
        ("status", e.status),
        ("destination", where(e)),
        ("region", e.region or "-"),
        ("access key id", mask_key_id(e.access_key_id) or "-"),
        *([("role", f"{e.role_arn} (external id {e.external_id})")] if e.role_arn else []),
        ("encryption", describe_sse(e.sse, e.kms_key_id)),
        ("frequency", f"{e.frequency} (lag {duration(e.lag_ms)})"),
        ("format", e.format),
        *([("table", f"{e.table} (a Delta Lake log per dataset)")] if e.table else []),
        ("datasets", ", ".join(d.dataset for d in e.datasets)),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.line(f"{key.ljust(width)}  {escape(value)}")


def changed(out: Output, record: ExportRecord, verb: str) -> None:
    """A state change (pause, resume, export now, delete): the verb and the status it left."""
    export_changed(out, record, f"Export {record.id} {verb}; status {record.status}.")


def role_setup(out: Output, setup: Any) -> None:
    """``setup`` is a `destination.sts.RoleSetup`: the external id, then the trust policy to paste."""
    if out.as_json:
        out.json(shapes().role_setup_json(setup))
        return
    out.line(f"External id for a role export of {setup.account_id}: {setup.external_id}")
    out.line("Paste this trust policy on your role (IAM > Roles > Trust relationships), then create the export")
    out.line(f"with --role-arn <your role's ARN> --external-id {setup.external_id}:")
    out.line(json.dumps(setup.trust_policy, indent=2))


def created(out: Output, record: ExportRecord) -> None:
    if out.as_json:
        out.json(export_json(record))
    else:
        out.line(f"Created export {record.id}. The first files arrive after the first {record.frequency} window.")
        describe(out, record)


def export_list(out: Output, records: Sequence[ExportRecord], *, include_deleted: bool) -> None:
    if out.as_json:
        out.json([export_json(r) for r in records])
        return
    if not records:
        out.line("No exports." + ("" if include_deleted else " (--all also shows deleted ones)"))
        return
    out.line(
        table(
            ("EXPORT", "ACCOUNT", "STATUS", "FREQ", "FORMAT", "DATASETS", "DESTINATION"),
            [
                (r.id, r.account_id, r.status, r.frequency, r.format, ",".join(d.dataset for d in r.datasets), where(r))
                for r in records
            ],
        )
    )


def export_status(out: Output, status: ExportStatus) -> None:
    e = status.export
    if out.as_json:
        out.json(shapes().status_json(status))
        return
    describe(out, e)
    if e.export_now_at is not None:
        out.line(f"export now  requested at {when(e.export_now_at)}")
    out.line()
    out.line(
        table(
            ("DATASET", "POSITION (UTC)", "BEHIND", "FAILURES", "NEXT RETRY"),
            [
                (
                    d.dataset,
                    when(d.position_ms),
                    "-" if d.behind_ms is None else duration(d.behind_ms),
                    d.last_error.attempts if d.last_error else 0,
                    when(d.last_error.next_retry_at) if d.last_error else "-",
                )
                for d in status.datasets
            ],
        )
    )
    for d in status.datasets:
        if d.snapshot_late_ms is not None:
            due = when(d.snapshot_due_at)
            lateness = f"late by {duration(d.snapshot_late_ms)}" if d.snapshot_late_ms else "on time"
            out.line(f"{d.dataset} snapshot of {when(d.position_ms)[:10]}: due {due}, {lateness}")
    errors = [d.last_error for d in status.datasets if d.last_error]
    for err in errors:
        out.line()
        out.line(f"last error of {err.dataset} (shown until a run succeeds):")
        out.line(f"  window      {err.window if err.window else '-'}")
        out.line(f"  at          {when(err.at)}")
        out.line(f"  attempts    {err.attempts}")
        out.line(f"  next retry  {when(err.next_retry_at)}")
        out.line(f"  message     {sanitize_error(err.message)}")
    if not errors:
        out.line()
        out.line("No errors.")


def export_now_plan(out: Output, plan: ExportNowPlan, warning: str | None) -> None:
    if out.as_json:
        body = export_json(plan.export)
        body["export_now"] = [
            {"dataset": name, "from_ms": w.from_ms, "to_ms": w.to_ms, "window": str(w)} for name, w in plan.due
        ]
        body["daemon_warning"] = warning
        out.json(body)
        return
    out.line(f"Export {plan.export.id}: export now requested; the scheduler starts it at its next tick (within 30 s):")
    for name, window in plan.due:
        what = f"snapshot of {window.date_key}" if DATASETS[name].is_snapshot else f"from {window}"
        out.line(f"  {name:14} {what}")


def run_history(out: Output, runs: Sequence[RunHistory]) -> None:
    if out.as_json:
        out.json(shapes().history_json(runs))
        return
    if not runs:
        out.line("No runs in the last 14 days.")
        return
    out.line(
        table(
            ("STARTED (UTC)", "DAY", "TRIGGER", "STATUS", "DATASETS", "WINDOWS", "ROWS", "FILES", "SIZE", "ERROR"),
            [
                (
                    when(r.started_at),
                    ",".join(r.days) or "-",
                    r.trigger or "-",
                    r.status,
                    ",".join(r.datasets),
                    r.windows,
                    r.rows,
                    r.files,
                    size(r.bytes),
                    sanitize_error(r.error or r.note or "", 200),
                )
                for r in runs
            ],
        )
    )


def rotation(out: Output, report: RotationReport) -> bool:
    """Shows a key rotation; returns whether every stored secret was re-sealed."""
    body = shapes().resealed_json(report)
    failed = body["failed"]
    if out.as_json:
        out.json(body)
    else:
        out.line(f"Re-sealed {report.resealed} secret(s).")
        for item in failed:
            out.line(f"NOT re-sealed: export {escape(item['export_id'])}: {sanitize_error(item['error'])}")
        if failed:
            out.line(
                "Keep the old keys in SEQEXPORT_SECRET_KEYS until these are fixed (or the destination re-entered)."
            )
        else:
            out.line("Old keys may now be dropped from SEQEXPORT_SECRET_KEYS.")
    return not failed


def demo_json(summary: DemoSummary) -> None:
    print(
        json.dumps(
            {
                "home": str(summary.home),
                "exports": [
                    {"account_id": e.account_id, "export_id": e.export_id, "root": str(e.root)} for e in summary.exports
                ],
                "windows": summary.windows,
                "files": summary.files,
                "rows": summary.rows,
                "bytes": summary.bytes,
                "seconds": round(summary.seconds, 3),
                "runs": summary.runs,
                "dagster_home": str(summary.dagster_home) if summary.dagster_home else None,
                "duckdb_query": summary.duckdb_query(),
                "duckdb_commands": summary.duckdb_commands(),
            }
        )
    )


def demo_summary(summary: DemoSummary, counts: Sequence[Sequence[Any]] | None) -> None:
    """The demo's closing words; ``counts`` are its DuckDB query's rows (None without DuckDB)."""
    print(
        f"\nExported {summary.rows:,} rows in {summary.windows} windows, {summary.files} files, "
        f"{summary.bytes / 1e6:.2f} MB, in {summary.seconds:.1f} s."
    )
    for e in summary.exports:
        print(f"  {e.account_id:8} {e.export_id}  ->  {e.root}")
    print("\nQuery the files with DuckDB:\n")
    print(f"  {summary.duckdb_query()}\n")
    python, shell = summary.duckdb_commands()
    print(f"Run it (saved in {summary.query_file}) from this Python, which has DuckDB with the test extra:\n")
    print(f"  {python}\n")
    print(f"or in the DuckDB shell (https://duckdb.org/docs/installation):\n\n  {shell}\n")
    if counts is not None:
        for event_type, count in counts:
            print(f"  {event_type:14} {count:>8,}")
        print()
    if summary.dagster_home:
        print(f"{summary.runs} Dagster runs are recorded in {summary.dagster_home}. Browse them with:\n")
        print(f"  {summary.browse_hint()}\n")


def token_json(token: ApiToken) -> dict[str, object]:
    return dict(shapes().token_json(token))


def token_created(out: Output, token: ApiToken, value: str) -> None:
    """The one time a token's value is shown: printed past `Output`, which would scrub it."""
    if out.as_json:
        print(json.dumps({**token_json(token), "token": value}, indent=2))
        return
    print(
        f"Created {token.scope} token {token.id}"
        + (f" for account {token.account_id}" if token.account_id else "")
        + (f", valid until {when(token.expires_at)}" if token.expires_at else "")
        + "."
    )
    print("It is shown only now; store it in your secret manager:")
    print(value)


def token_revoked(out: Output, token: ApiToken) -> None:
    if out.as_json:
        out.json(token_json(token))
    else:
        out.line(f"Token {token.id} is revoked; requests with it now get 401.")


def token_list(out: Output, tokens: Sequence[ApiToken]) -> None:
    if out.as_json:
        out.json([token_json(t) for t in tokens])
    elif not tokens:
        out.line("No tokens.")
    else:
        out.line(
            table(
                (
                    "TOKEN",
                    "SCOPE",
                    "ACCOUNT",
                    "NAME",
                    "CREATED (UTC)",
                    "EXPIRES (UTC)",
                    "LAST USED (UTC)",
                    "REVOKED (UTC)",
                ),
                [
                    (
                        t.id,
                        t.scope,
                        t.account_id or "*",
                        t.name or "-",
                        when(t.created_at),
                        when(t.expires_at),
                        when(t.last_used_at),
                        when(t.revoked_at),
                    )
                    for t in tokens
                ],
            )
        )


def backfill_report(out: Output, start: str, end: str, report: BatchReport, *, redeliver: bool = False) -> None:
    from seqexport_dagster.delivery.backfill import summarize

    outcomes: list[dict[str, Any]] = [
        {"export_id": s.export_id, "status": s.status, "rows": s.written_rows, "files": s.written_files,
         "bytes": s.written_bytes, "already_present": s.present_files, "recorded_windows": s.recorded_windows,
         "why": list(s.why), "errors": [{"dataset": d, "message": m} for d, m in s.errors]}
        for s in summarize(report, redeliver=redeliver)
    ]  # fmt: skip
    if out.as_json:
        out.json({"from": start, "to": end, "redeliver": redeliver, "exports": outcomes})
        return
    for o in outcomes:
        line = f"{o['export_id']}: {o['status']}; wrote {o['files']} files ({o['rows']} rows, {o['bytes']} bytes)"
        if o["already_present"]:
            line += f"; {o['already_present']} files already in the bucket, left as they are"
        out.line(line)
        for why in o["why"]:
            out.line(f"  {why}")
        for e in o["errors"]:
            out.line(f"  {e['dataset']}: {sanitize_error(e['message'])}")
