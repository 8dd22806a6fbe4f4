"""The `seqexport` command line. It only parses and prints; the work is done by the core and the API.

Every management command is a thin call into `seqexport_dagster.api.Exports`, so the dashboard, the
CLI and scripts share one implementation. Errors from our error tree become stable exit codes (see
`EXIT_CODES_HELP`); anything else is a bug and still never prints a traceback or a secret.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, NoReturn

from seqexport_dagster.errors import (
    ConfigurationError,
    ConflictError,
    ConnectionTestFailed,
    EndpointRefused,
    ExportError,
    InvalidInput,
    NotFound,
    RateLimited,
    RetryableError,
    SecretKeyError,
    UsageError,
    sanitize_error,
)
from seqexport_dagster.progress import reporter
from seqexport_dagster.schema import DATASETS
from seqexport_dagster.window import iso_ms

if TYPE_CHECKING:
    # The API pulls in SQLAlchemy and Alembic (about a second); `seqexport --help` must not wait.
    from seqexport_dagster.api import Exports
    from seqexport_dagster.remote import RemoteExports
    from seqexport_dagster.store import ExportRecord

    #: The database (`Exports`) or the HTTP API (`RemoteExports`, with SEQEXPORT_API_URL): same methods.
    AnyExports = Exports | RemoteExports

Handler = Callable[[argparse.Namespace, "AnyExports", "Output"], int]

EXIT_OK: Final = 0
EXIT_INTERNAL: Final = 1
EXIT_BAD_INPUT: Final = 2
EXIT_NOT_FOUND: Final = 3
EXIT_CONFLICT: Final = 4
EXIT_CONNECTION: Final = 5
EXIT_UNAVAILABLE: Final = 6
EXIT_VERIFY_FAILED: Final = 7
EXIT_RATE_LIMITED: Final = 8

EXIT_CODES_HELP: Final = """\
exit codes (stable; scripts may rely on them):
  0  ok
  1  internal error (a bug: please report it)
  2  bad input: a value is wrong or missing; the message names the field and what is accepted
  3  not found: no export with that id
  4  conflict: not possible in the export's current state (deleted, paused, dataset already there,
     export-now with nothing to export yet: the message says when it can)
  5  connection test failed: the store refused or did not answer the test write; nothing was saved
  6  unavailable: the control-plane database is missing (`seqexport init` creates it) or away, or the
     credential keys (SEQEXPORT_SECRET_KEYS) are not usable; remotely: the API is unreachable, refused
     the token, or asks to retry later
     (rotate-keys: some stored secrets did not open; each is listed, the others were re-sealed)
  7  verify found problems in the bucket (the report lists each one)
  8  rate limited: too many connection tests for this account recently; the message says when to retry

Every command takes --json (before or after the command name): results go to stdout as JSON,
errors as {"error": {...}}. Progress goes to stderr. Secrets are never printed.
configuration: SEQEXPORT_DATABASE_URL, SEQEXPORT_SECRET_KEYS, SEQEXPORT_HOME, SEQEXPORT_ALLOW_LOCAL
remote: with SEQEXPORT_API_URL and SEQEXPORT_API_TOKEN set, the management commands call the HTTP API
"""


#: Our error tree as (type, exit code), most specific first: the first type the error is wins.
ERROR_EXITS: Final[tuple[tuple[type[ExportError], str, int], ...]] = (
    (ConnectionTestFailed, "connection_test_failed", EXIT_CONNECTION),
    (InvalidInput, "invalid_input", EXIT_BAD_INPUT),
    (EndpointRefused, "invalid_input", EXIT_BAD_INPUT),
    (NotFound, "not_found", EXIT_NOT_FOUND),
    (ConflictError, "conflict", EXIT_CONFLICT),
    (RateLimited, "rate_limited", EXIT_RATE_LIMITED),
    (RetryableError, "unavailable", EXIT_UNAVAILABLE),
    (SecretKeyError, "unavailable", EXIT_UNAVAILABLE),
    (ConfigurationError, "unavailable", EXIT_UNAVAILABLE),
    (ExportError, "error", EXIT_INTERNAL),
)


def exit_for(exc: ExportError) -> tuple[str, int]:
    """The error's kind (the ``type`` of ``--json``'s error) and exit code, from `ERROR_EXITS`."""
    return next((kind, code) for cls, kind, code in ERROR_EXITS if isinstance(exc, cls))


def _error_field(exc: ExportError) -> str | None:
    if isinstance(exc, InvalidInput):
        return exc.field
    return "endpoint" if isinstance(exc, EndpointRefused) else None


_ENV_NAME_RE: Final = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}\Z")


#: Options whose field has another name in errors than the option's.
_OPTION_FIELDS: Final = {"lag-minutes": "lag", "secret-env": "secret", "secret-stdin": "secret"}
_USAGE_ARGUMENT_RE: Final = re.compile(r"^argument --([a-z-]+)[:/ ]")


def _usage_field(message: str) -> str | None:
    """The field argparse complained about (``argument --lag-minutes: expected one argument``)."""
    found = _USAGE_ARGUMENT_RE.match(message)
    if not found:
        return None
    option = found.group(1)
    return _OPTION_FIELDS.get(option, option.replace("-", "_"))


class _Parser(argparse.ArgumentParser):
    """No abbreviated options (``--secret`` must not quietly mean ``--secret-env``), and errors
    that never echo a stray value: someone typing ``--secret-access-key VALUE`` must not see the
    value printed back into a terminal log."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        head, sep, rest = message.partition("unrecognized arguments: ")
        if sep:
            options = [word for word in rest.split() if word.startswith("-")]
            message = f"{head}unrecognized arguments: {' '.join(options) or '(values not shown)'}"
            if any(word in rest.lower() for word in ("secret", "password")):
                message += (
                    "; a secret is never a command-line value: use --secret-stdin, --secret-env NAME or the prompt"
                )
        raise UsageError(f"{message} (see `{self.prog} --help`)")


class Output:
    """Prints results and errors; scrubs every secret the command has read from all of it."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.secrets: list[str] = []

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            # Also its JSON-escaped form; a secret of a few characters would blank out every
            # matching word of the output, and no real store issues one that short.
            if len(secret) >= 4:
                text = text.replace(secret, "***").replace(json.dumps(secret)[1:-1], "***")
        return text

    def line(self, text: str = "") -> None:
        print(self.scrub(text), file=sys.stdout)

    def progress(self, text: str) -> None:
        print(self.scrub(text), file=sys.stderr, flush=True)

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


def _shapes() -> ModuleType:
    """`seqexport_dagster.presentation`, the JSON shapes shared with the HTTP API (imported late, see above)."""
    import seqexport_dagster.presentation as shapes

    return shapes


def mask_key_id(access_key_id: str | None) -> str | None:
    masked: str | None = _shapes().mask_key_id(access_key_id)
    return masked


def export_json(e: ExportRecord) -> dict[str, object]:
    return dict(_shapes().export_json(e))


def _iso(ms: int | None) -> str | None:
    return None if ms is None else iso_ms(ms)


def _when(ms: int | None) -> str:
    return "-" if ms is None else iso_ms(ms)[:19].replace("T", " ") + "Z"


def _duration(ms: int) -> str:
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


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Aligned columns for people; numbers right-aligned."""
    cells = [[str(c) for c in headers], *[["-" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], int) for row in rows) and bool(rows) for i in range(len(headers))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(r, widths, numeric, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _where(e: ExportRecord) -> str:
    scheme = {"s3": "s3", "gcs": "gs", "local": "file"}.get(e.provider, e.provider)
    where = f"{scheme}://{e.bucket}/{e.prefix}".rstrip("/")
    return f"{where} via {e.endpoint}" if e.endpoint and e.provider != "gcs" else where


def _describe(out: Output, e: ExportRecord) -> None:
    rows = [
        ("export", e.id),
        ("account", e.account_id),
        ("status", e.status),
        ("destination", _where(e)),
        ("region", e.region or "-"),
        ("access key id", mask_key_id(e.access_key_id) or "-"),
        ("frequency", f"{e.frequency} (lag {_duration(e.lag_ms)})"),
        ("datasets", ", ".join(d.dataset for d in e.datasets)),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        out.line(f"{key.ljust(width)}  {value}")


def _read_secret(args: argparse.Namespace, out: Output, *, required: bool) -> str | None:
    """The secret from stdin, an environment variable or a prompt; never from the command line."""
    env: Mapping[str, str] = args.environ
    secret: str | None = None
    if args.secret_env is not None and not args.secret_env.strip():
        raise InvalidInput("secret", "--secret-env needs the NAME of an environment variable holding the secret")
    if args.secret_stdin and args.secret_env:
        raise InvalidInput("secret", "give --secret-stdin or --secret-env, not both")
    if args.secret_stdin:
        secret = sys.stdin.readline().rstrip("\r\n")
        if not secret:
            raise InvalidInput("secret", "--secret-stdin read an empty line; pipe the secret access key in")
    elif args.secret_env:
        secret = env.get(args.secret_env)
        if not secret:
            # Named only when it looks like a variable name: people paste the secret itself here.
            name = args.secret_env if _ENV_NAME_RE.match(args.secret_env) else "given with --secret-env"
            raise InvalidInput(
                "secret", f"environment variable {name} is not set or empty (--secret-env takes the variable's NAME)"
            )
    elif required or getattr(args, "secret_prompt", False):
        if not sys.stdin.isatty():
            raise InvalidInput(
                "secret",
                "the secret access key is missing: give --secret-stdin (pipe it in), --secret-env NAME, "
                "or run in a terminal to be prompted",
            )
        secret = getpass.getpass("Secret access key: ")
        if not secret:
            raise InvalidInput("secret", "the secret access key may not be empty")
    if secret:
        out.secrets.append(secret)
    return secret


def _create(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    datasets = list(DATASETS) if args.datasets.strip() == "all" else args.datasets
    record = api.create(
        account_id=args.account,
        provider=args.provider,
        bucket=args.bucket,
        prefix=args.prefix,
        region=args.region,
        endpoint=args.endpoint,
        access_key_id=args.access_key_id,
        secret_access_key=lambda: _read_secret(args, out, required=args.provider != "local"),
        datasets=datasets,
        frequency=args.frequency,
        lag_ms=_lag_ms(args.lag_minutes),
        progress=out.progress,
    )
    if out.as_json:
        out.json(export_json(record))
    else:
        out.line(f"Created export {record.id}. The first files arrive after the first {record.frequency} window.")
        _describe(out, record)
    return EXIT_OK


def _lag_ms(minutes: str) -> int:
    shown = sanitize_error(repr(minutes), 80)
    try:
        value = float(minutes)
    except ValueError:
        raise InvalidInput("lag", f"{shown} is not a number of minutes (0 to 60)") from None
    if not -1e6 <= value <= 1e6:  # NaN and infinities fail too; 1e308 minutes would overflow below
        raise InvalidInput("lag", f"{shown} minutes is out of range: use 0 to 60 minutes")
    from seqexport_dagster.api import validate_lag_ms

    return validate_lag_ms(int(round(value * 60_000)))


def _list(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    records = api.list(account_id=args.account, include_deleted=args.all)
    if out.as_json:
        out.json([export_json(r) for r in records])
        return EXIT_OK
    if not records:
        out.line("No exports." + ("" if args.all else " (--all also shows deleted ones)"))
        return EXIT_OK
    out.line(
        table(
            ("EXPORT", "ACCOUNT", "STATUS", "FREQ", "DATASETS", "DESTINATION"),
            [
                (r.id, r.account_id, r.status, r.frequency, ",".join(d.dataset for d in r.datasets), _where(r))
                for r in records
            ],
        )
    )
    return EXIT_OK


def _status(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    status = api.status(args.export_id)
    e = status.export
    if out.as_json:
        body = _shapes().status_json(status)
        out.json(body)
        return EXIT_OK
    _describe(out, e)
    if e.export_now_at is not None:
        out.line(f"export now  requested at {_when(e.export_now_at)}")
    out.line()
    out.line(
        table(
            ("DATASET", "POSITION (UTC)", "BEHIND", "FAILURES", "NEXT RETRY"),
            [
                (
                    d.dataset,
                    _when(d.position_ms),
                    _duration(d.behind_ms),
                    d.last_error.attempts if d.last_error else 0,
                    _when(d.last_error.next_retry_at) if d.last_error else "-",
                )
                for d in status.datasets
            ],
        )
    )
    errors = [d.last_error for d in status.datasets if d.last_error]
    for err in errors:
        out.line()
        out.line(f"last error of {err.dataset} (shown until a run succeeds):")
        out.line(f"  window      {err.window if err.window else '-'}")
        out.line(f"  at          {_when(err.at)}")
        out.line(f"  attempts    {err.attempts}")
        out.line(f"  next retry  {_when(err.next_retry_at)}")
        out.line(f"  message     {sanitize_error(err.message)}")
    if not errors:
        out.line()
        out.line("No errors.")
    return EXIT_OK


def _changed(verb: str) -> Callable[[ExportRecord, Output], int]:
    def show(record: ExportRecord, out: Output) -> int:
        if out.as_json:
            out.json(export_json(record))
        else:
            out.line(f"Export {record.id} {verb}; status {record.status}.")
        return EXIT_OK

    return show


def _pause(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    return _changed("paused (position kept)")(api.pause(args.export_id), out)


def _resume(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    return _changed("resumed (catches up from its position)")(api.resume(args.export_id), out)


def _export_now(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    if not hasattr(api, "export_now_plan"):  # the remote CLI: the HTTP API answers with the export
        return _changed("will run at the next scheduler tick (no backoff wait)")(api.export_now(args.export_id), out)
    plan = api.export_now_plan(args.export_id)
    from seqexport_dagster.daemon_health import daemon_warning

    warning = daemon_warning(args.environ)
    if warning:
        out.progress(f"warning: {warning}")
    if out.as_json:
        body = export_json(plan.export)
        body["export_now"] = [
            {"dataset": name, "from_ms": w.from_ms, "to_ms": w.to_ms, "window": str(w)} for name, w in plan.due
        ]
        body["daemon_warning"] = warning
        out.json(body)
        return EXIT_OK
    out.line(f"Export {plan.export.id}: export now requested; the scheduler starts it at its next tick (within 30 s):")
    for name, window in plan.due:
        out.line(f"  {name:14} {'snapshot of ' + window.date_key if name == 'subscribers' else 'from ' + str(window)}")
    return EXIT_OK


def _frequency(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    record = api.change_frequency(args.export_id, args.frequency)
    if out.as_json:
        out.json(export_json(record))
    else:
        out.line(
            f"Export {record.id} now runs every {record.frequency}; each dataset continues from its position "
            "to the next point of the new grid, with no gap."
        )
    return EXIT_OK


def _confirm_delete(args: argparse.Namespace, api: AnyExports) -> None:
    if args.yes:
        return
    record = api.status(args.export_id).export
    if not sys.stdin.isatty():
        raise InvalidInput(
            "yes", f"deleting export {record.id} needs confirmation: pass --yes (scripts) or run it in a terminal"
        )
    print(
        f"Delete export {record.id} of {record.account_id} ({_where(record)})? It stops for good; "
        "files stay in the bucket.",
        file=sys.stderr,
    )
    answer = input("Type the export id to confirm: ").strip()
    if answer != record.id:
        raise InvalidInput("yes", "not confirmed: nothing was deleted")


def _delete(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    _confirm_delete(args, api)
    return _changed("deleted; files already written stay in the bucket, history stays readable")(
        api.delete(args.export_id), out
    )


def _init(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    from seqexport_dagster.api import shown_url

    where = shown_url(args.settings.database_url)
    if out.as_json:
        out.json({"database_url": where, "created": not args.existed})
    elif args.existed:
        out.line(f"Control plane at {where} already exists; its schema is up to date.")
    else:
        out.line(f"Created the control plane at {where}.")
    return EXIT_OK


def _datasets(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    if args.action == "add":
        record = api.add_datasets(args.export_id, args.names)
        verb = f"now also exports {args.names} (from now on)"
    else:
        record = api.remove_datasets(args.export_id, args.names)
        verb = f"no longer exports {args.names} (files stay)"
    if out.as_json:
        out.json(export_json(record))
    else:
        out.line(f"Export {record.id} {verb}; datasets: {', '.join(d.dataset for d in record.datasets)}.")
    return EXIT_OK


def _destination(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    needs_secret = args.access_key_id is not None or (args.provider is not None and args.provider != "local")
    asked = needs_secret or args.secret_stdin or args.secret_env is not None or args.secret_prompt
    record = api.change_destination(
        args.export_id,
        provider=args.provider,
        bucket=args.bucket,
        prefix=args.prefix,
        region=args.region,
        endpoint=args.endpoint,
        access_key_id=args.access_key_id,
        secret_access_key=(lambda: _read_secret(args, out, required=needs_secret)) if asked else None,
        progress=out.progress,
    )
    if out.as_json:
        out.json(export_json(record))
    else:
        out.line(f"Export {record.id} now writes to {_where(record)}; it continues from its position there.")
    return EXIT_OK


def _history(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    runs = api.history(args.export_id)
    if out.as_json:
        out.json(_shapes().history_json(runs))
        return EXIT_OK
    if not runs:
        out.line("No runs in the last 14 days.")
        return EXIT_OK
    out.line(
        table(
            ("STARTED (UTC)", "DAY", "TRIGGER", "STATUS", "DATASETS", "WINDOWS", "ROWS", "FILES", "SIZE", "ERROR"),
            [
                (
                    _when(r.started_at),
                    ",".join(r.days) or "-",
                    r.trigger or "-",
                    r.status,
                    ",".join(r.datasets),
                    r.windows,
                    r.rows,
                    r.files,
                    _size(r.bytes),
                    sanitize_error(r.error or r.note or "", 200),
                )
                for r in runs
            ],
        )
    )
    return EXIT_OK


def _rotate_keys(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    out.progress("re-sealing stored secrets with the first key of SEQEXPORT_SECRET_KEYS ...")
    from seqexport_dagster.api import Exports

    with reporter(out.as_json) as shown:
        # Progress where the work happens: a remote rotation runs in the server.
        report = api.rotate_keys(progress=shown.advance) if isinstance(api, Exports) else api.rotate_keys()
    body = _shapes().resealed_json(report)
    failed = body["failed"]
    if out.as_json:
        out.json(body)
    else:
        out.line(f"Re-sealed {report.resealed} secret(s).")
        for item in failed:
            out.line(f"NOT re-sealed: export {item['export_id']}: {item['error']}")
        if failed:
            out.line(
                "Keep the old keys in SEQEXPORT_SECRET_KEYS until these are fixed (or the destination re-entered)."
            )
        else:
            out.line("Old keys may now be dropped from SEQEXPORT_SECRET_KEYS.")
    return EXIT_UNAVAILABLE if failed else EXIT_OK


def _add_secret_options(p: argparse.ArgumentParser, *, prompt_flag: bool) -> None:
    group = p.add_argument_group("secret access key (never a command-line value)")
    group.add_argument("--secret-stdin", action="store_true", help="read the secret from the first line of stdin")
    group.add_argument("--secret-env", metavar="NAME", help="read the secret from environment variable NAME")
    if prompt_flag:
        group.add_argument("--secret-prompt", action="store_true", help="prompt for a new secret (same key id)")


def _add_commands(sub: argparse._SubParsersAction[_Parser], common: _Parser) -> None:
    def command(name: str, handler: Handler, help_text: str, *, export_id: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
        if export_id:
            p.add_argument("export_id", metavar="EXPORT_ID", help="the export, e.g. exp_0123456789abcdef")
        p.set_defaults(handler=handler)
        return p

    p = command(
        "create",
        _create,
        "create an export (tests the destination first; nothing is saved on failure)",
        export_id=False,
    )
    p.add_argument("--account", required=True, help="the Sequenzy account id")
    p.add_argument("--provider", default="s3", help="s3 (AWS, or S3-compatible with --endpoint) or gcs (default s3)")
    p.add_argument("--bucket", required=True, help="bucket name")
    p.add_argument("--prefix", default="", help="folder inside the bucket, e.g. sequenzy (default: the bucket root)")
    p.add_argument("--region", help="bucket region, e.g. us-east-1 (required for AWS)")
    p.add_argument("--endpoint", help="S3-compatible endpoint, e.g. https://<account-id>.r2.cloudflarestorage.com")
    p.add_argument("--access-key-id", help="access key id (for gcs: the HMAC key's access id)")
    _add_secret_options(p, prompt_flag=False)
    p.add_argument("--datasets", default="all", help=f"comma-separated: {', '.join(DATASETS)} (default all)")
    p.add_argument("--frequency", default="1h", help="15m, 1h, 6h or 24h (default 1h)")
    p.add_argument(
        "--lag-minutes", default="2", help="trail real time by this much so late writes are included (default 2)"
    )

    p = command("list", _list, "list exports", export_id=False)
    p.add_argument("--account", help="only this account's exports")
    p.add_argument("--all", action="store_true", help="include deleted exports")

    command("status", _status, "state, each dataset's position and delay, and the last error")
    command("pause", _pause, "pause an export; it keeps its position")
    command("resume", _resume, "resume a paused export; it catches up from its position with no gap")

    p = command("datasets", _datasets, "add or remove datasets (added ones start from now)", export_id=False)
    p.add_argument("action", choices=("add", "remove"), help="add or remove")
    p.add_argument("export_id", metavar="EXPORT_ID")
    p.add_argument("names", metavar="DATASETS", help=f"comma-separated: {', '.join(DATASETS)}")

    p = command(
        "destination", _destination, "move the export (bucket, prefix, endpoint) or rotate its keys; tests first"
    )
    p.add_argument("--provider", help="s3 or gcs")
    p.add_argument("--bucket")
    p.add_argument("--prefix", help="new prefix ('' for the bucket root)")
    p.add_argument("--region")
    p.add_argument("--endpoint", help="new endpoint ('' to go back to AWS)")
    p.add_argument("--access-key-id", help="new access key id (its secret is then required)")
    _add_secret_options(p, prompt_flag=True)

    command("export-now", _export_now, "run now instead of waiting for the schedule; says why not if it cannot")
    p = command("frequency", _frequency, "change how often windows are written; the chain stays gap-free")
    p.add_argument("frequency", metavar="FREQUENCY", help="15m, 1h, 6h or 24h")
    command("init", _init, "create (or migrate) the control plane named by the configuration", export_id=False)
    command("history", _history, "every run of the last 14 days: rows, files, size and error")
    p = command("delete", _delete, "stop an export for good; files stay in the bucket, history stays readable")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (scripts)")
    command(
        "rotate-keys",
        _rotate_keys,
        "re-seal stored secrets with the first key of SEQEXPORT_SECRET_KEYS",
        export_id=False,
    )


def _demo(args: argparse.Namespace) -> int:
    from seqexport_dagster.demo import run_demo

    with reporter(bool(args.json)) as shown:
        summary = run_demo(
            Path(args.home), Path(args.dest_dir) if args.dest_dir else None, progress=shown.line, advance=shown.advance
        )
    if args.json:
        print(
            json.dumps(
                {
                    "home": str(summary.home),
                    "exports": [
                        {"account_id": e.account_id, "export_id": e.export_id, "root": str(e.root)}
                        for e in summary.exports
                    ],
                    "windows": summary.windows,
                    "files": summary.files,
                    "rows": summary.rows,
                    "bytes": summary.bytes,
                    "seconds": round(summary.seconds, 3),
                    "runs": summary.runs,
                    "dagster_home": str(summary.dagster_home) if summary.dagster_home else None,
                    "duckdb_query": summary.duckdb_query(),
                }
            )
        )
        return 0
    print(
        f"\nExported {summary.rows:,} rows in {summary.windows} windows, {summary.files} files, "
        f"{summary.bytes / 1e6:.2f} MB, in {summary.seconds:.1f} s."
    )
    for e in summary.exports:
        print(f"  {e.account_id:8} {e.export_id}  ->  {e.root}")
    print("\nQuery the files with DuckDB:\n")
    print(f"  {summary.duckdb_query()}\n")
    try:
        import duckdb
    except ImportError:
        pass
    else:
        for event_type, count in duckdb.execute(summary.duckdb_query()).fetchall():
            print(f"  {event_type:14} {count:>8,}")
        print()
    if summary.dagster_home:
        print(f"{summary.runs} Dagster runs are recorded in {summary.dagster_home}. Browse them with:\n")
        print(
            f"  SEQEXPORT_HOME={summary.home} SEQEXPORT_ALLOW_LOCAL=1 DAGSTER_HOME={summary.dagster_home} \\\n"
            "    .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000\n"
        )
    return 0


def _verify(args: argparse.Namespace) -> int:
    """Customer-side: checks a bucket with the customer's read key; the ledger only for operators."""
    from seqexport_dagster.verify import verify_location

    out = Output(bool(args.json))
    secret = _read_secret(args, out, required=bool(args.access_key_id))
    ledger: Any = None
    api: AnyExports | None = None
    if args.ledger and args.environ.get("SEQEXPORT_API_URL"):
        # Customers: the ledger comes from the HTTP API (their token), the bucket from their read key.
        from seqexport_dagster.remote import RemoteExports

        api = RemoteExports.from_env(args.environ)
        ledger = (api, api.get_export(args.ledger).id)
    elif args.ledger:
        from seqexport_dagster.api import Exports
        from seqexport_dagster.config import Settings

        api = Exports.from_settings(Settings.from_env(args.environ), must_exist=True)
        ledger = (api.store, api.store.get_export(args.ledger).id)
    try:
        with reporter(out.as_json) as shown:
            report = verify_location(
                args.source,
                s3_endpoint=args.endpoint,
                access_key_id=args.access_key_id,
                secret_access_key=secret,
                region=args.region,
                ledger=ledger,
                progress=shown.advance,
            )
    finally:
        if api is not None:
            api.close()
    if out.as_json:
        out.line(report.to_json())
    else:
        out.line(report.render())
    return EXIT_OK if report.ok else EXIT_VERIFY_FAILED


def _local_only(args: argparse.Namespace, what: str) -> None:
    if args.environ.get("SEQEXPORT_API_URL"):
        raise InvalidInput(
            "SEQEXPORT_API_URL", f"{what} needs the control-plane database; unset SEQEXPORT_API_URL and run it there"
        )


def _tokens(args: argparse.Namespace) -> int:
    """Operators mint, list and revoke API tokens; a token's value is printed once, at creation."""
    from seqexport_dagster.api import Exports, validate_account, wall_clock_ms
    from seqexport_dagster.config import Settings
    from seqexport_dagster.store.token import TokenStore

    _local_only(args, "managing tokens")
    out = Output(bool(args.json))
    if args.action == "create" and bool(args.account) == bool(args.operator):
        raise InvalidInput("account", "give --account ACCOUNT for an account token, or --operator (sees every account)")
    if args.action == "revoke" and not args.token_id:
        raise InvalidInput("token_id", "give the id of the token to revoke (see `seqexport tokens list`)")
    if args.account:
        validate_account(args.account)
    api = Exports.from_settings(Settings.from_env(args.environ))
    try:
        tokens = TokenStore(api.store.engine)
        if args.action == "create":
            value, token = tokens.create(account_id=args.account, now_ms=wall_clock_ms(), name=args.name or "")
            out.secrets.append(value.rsplit("_", 1)[1])
            if out.as_json:
                print(json.dumps({**_token_json(token), "token": value}, indent=2))
            else:
                print(
                    f"Created {token.scope} token {token.id}"
                    + (f" for account {token.account_id}" if token.account_id else "")
                    + "."
                )
                print("It is shown only now; store it in your secret manager:")
                print(value)
            return EXIT_OK
        if args.action == "revoke":
            token = tokens.revoke(args.token_id, wall_clock_ms())
            if out.as_json:
                out.json(_token_json(token))
            else:
                out.line(f"Token {token.id} is revoked; requests with it now get 401.")
            return EXIT_OK
        listed = tokens.list(account_id=args.account, include_revoked=args.all)
        if out.as_json:
            out.json([_token_json(t) for t in listed])
        elif not listed:
            out.line("No tokens.")
        else:
            out.line(
                table(
                    ("TOKEN", "SCOPE", "ACCOUNT", "NAME", "CREATED (UTC)", "REVOKED (UTC)"),
                    [
                        (t.id, t.scope, t.account_id or "*", t.name or "-", _when(t.created_at), _when(t.revoked_at))
                        for t in listed
                    ],
                )
            )
        return EXIT_OK
    finally:
        api.close()


def _token_json(token: Any) -> dict[str, object]:
    return dict(_shapes().token_json(token))


def _serve(args: argparse.Namespace) -> int:
    from seqexport_dagster.config import Settings
    from seqexport_dagster.service.guard import RateLimit
    from seqexport_dagster.service.server import serve

    _local_only(args, "serving the API")
    if not 0 < args.port < 65536:
        raise InvalidInput("port", f"{args.port} is not a TCP port (1-65535)")
    serve(
        Settings.from_env(args.environ), host=args.host, port=args.port, write_limit=RateLimit.parse(args.write_limit)
    )
    return EXIT_OK


def _backfill(args: argparse.Namespace) -> int:
    """Operators: re-deliver days for chosen exports (create-only; never before an export's start)."""
    import uuid

    from seqexport_dagster.api import Exports
    from seqexport_dagster.backfill import backfill
    from seqexport_dagster.config import Settings
    from seqexport_dagster.runner import wall_clock_ms
    from seqexport_dagster.source.reader import SourceReader
    from seqexport_dagster.store.database import create_engine

    _local_only(args, "seqexport backfill")
    out = Output(bool(args.json))
    settings = Settings.from_env(args.environ)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()] if args.datasets else []
    api = Exports.from_settings(settings)
    source = create_engine(settings.source_url)
    try:
        report = backfill(
            api.store,
            SourceReader(source),
            settings.policy,
            args.export,
            args.start,
            args.end,
            clock=wall_clock_ms,
            datasets=datasets,
            holder=f"seqexport-backfill-{uuid.uuid4().hex[:8]}",
        )
    finally:
        source.dispose()
        api.close()
    outcomes: list[dict[str, Any]] = [
        {"export_id": o.export_id, "status": o.status, "rows": o.rows, "files": o.files, "bytes": o.bytes,
         "errors": [{"dataset": d, "message": m} for d, m in o.errors]}
        for o in report.outcomes.values()
    ]  # fmt: skip
    if out.as_json:
        out.json({"from": args.start, "to": args.end, "exports": outcomes})
    else:
        for o in outcomes:
            out.line(f"{o['export_id']}: {o['status']}; {o['rows']} rows, {o['files']} files, {o['bytes']} bytes")
            for e in o["errors"]:
                out.line(f"  {e['dataset']}: {e['message']}")
    return EXIT_OK if all(o["status"] == "done" for o in outcomes) else EXIT_INTERNAL


def build_parser() -> argparse.ArgumentParser:
    # --json works before or after the command: the subcommands' copy must not reset the main one.
    common = _Parser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON to stdout")
    parser = _Parser(
        prog="seqexport",
        description="Sequenzy Data Exports: manage exports, run the demo, verify a bucket.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", default=False, help="print JSON to stdout")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    demo = sub.add_parser(
        "demo", help="build demo data for two accounts and export it into local folders", parents=[common]
    )
    demo.add_argument("--home", default=".demo", help="demo folder, rebuilt on each run (default .demo)")
    demo.add_argument("--dest-dir", help="make DIR the root of the first account's export")
    demo.set_defaults(plain_handler=_demo)
    verify = sub.add_parser(
        "verify",
        help="check a bucket prefix or local folder holds every window exactly once (read credentials)",
        description="Check windows chain without gaps or overlaps, parts, gzip, line limits, row order and "
        "windows, duplicate ids and each snapshot's _SUCCESS. Exits 7 if anything is wrong.",
        parents=[common],
    )
    verify.add_argument("source", metavar="SOURCE", help="s3://bucket/prefix, gs://bucket/prefix or a local folder")
    verify.add_argument("--endpoint", help="S3-compatible endpoint (R2, MinIO, B2); gs:// uses Google's")
    verify.add_argument("--region", help="bucket region (default us-east-1)")
    verify.add_argument("--access-key-id", help="a read key (List + Get); default: your AWS credential chain")
    _add_secret_options(verify, prompt_flag=False)
    verify.add_argument("--ledger", metavar="EXPORT_ID", help="operators: also compare rows per window with the ledger")
    verify.set_defaults(plain_handler=_verify)
    tokens = sub.add_parser(
        "tokens",
        help="operators: mint, list and revoke HTTP API tokens (needs the control-plane database)",
        description="A token is shown once and stored hashed; its id (sqx_...) identifies it in lists and logs.",
        parents=[common],
    )
    tokens.add_argument("action", choices=("create", "list", "revoke"))
    tokens.add_argument("token_id", metavar="TOKEN_ID", nargs="?", help="for revoke: the token's id, sqx_...")
    tokens.add_argument("--account", help="the account the token may see and change (create), or list its tokens")
    tokens.add_argument("--operator", action="store_true", help="create: an operator token, which sees every account")
    tokens.add_argument("--name", help="create: a note on who holds the token, e.g. 'dashboard'")
    tokens.add_argument("--all", action="store_true", help="list: include revoked tokens")
    tokens.set_defaults(plain_handler=_tokens)
    serve_cmd = sub.add_parser("serve", help="run the HTTP API (uvicorn) over the control plane", parents=[common])
    serve_cmd.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve_cmd.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    serve_cmd.add_argument(
        "--write-limit",
        default="10/60",
        help="per account: destination writes (create, move) per seconds (default 10/60)",
    )
    serve_cmd.set_defaults(plain_handler=_serve)
    backfill = sub.add_parser(
        "backfill",
        help="operators: re-deliver days for chosen exports (create-only; never before an export's start)",
        parents=[common],
    )
    backfill.add_argument("--export", action="append", required=True, metavar="EXPORT_ID", help="repeatable")
    backfill.add_argument("--from", dest="start", required=True, metavar="YYYY-MM-DD", help="first UTC day")
    backfill.add_argument("--to", dest="end", required=True, metavar="YYYY-MM-DD", help="last UTC day (inclusive)")
    backfill.add_argument("--datasets", help=f"comma-separated (default all): {', '.join(DATASETS)}")
    backfill.set_defaults(plain_handler=_backfill)
    _add_commands(sub, common)
    return parser


def _run(args: argparse.Namespace, out: Output, clock: Callable[[], int] | None) -> int:
    plain: Callable[[argparse.Namespace], int] | None = getattr(args, "plain_handler", None)
    if plain is not None:
        return int(plain(args))
    from seqexport_dagster.api import Exports
    from seqexport_dagster.config import Settings

    api: AnyExports
    if args.environ.get("SEQEXPORT_API_URL"):
        from seqexport_dagster.remote import RemoteExports

        api = RemoteExports.from_env(args.environ)
    else:
        settings = Settings.from_env(args.environ)
        # Only these may bring a control plane into being: a typo elsewhere must not make an empty one.
        must_exist = args.command not in ("create", "init")
        if args.command == "init":
            args.settings = settings
            args.existed = _control_plane_exists(settings)
        if not must_exist:
            settings.secret_box()  # keys fail closed before any folder or file comes into being
            _make_sqlite_folder(settings.database_url)
        kwargs: dict[str, Any] = {"must_exist": must_exist}
        if clock:
            kwargs["clock"] = clock
        api = Exports.from_settings(settings, **kwargs)
    try:
        handler: Handler = args.handler
        return handler(args, api, out)
    finally:
        api.close()


def _make_sqlite_folder(url: str) -> None:
    """A new SQLite control plane's folder (SQLite makes the file, not the folder)."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).parent.mkdir(mode=0o700, parents=True, exist_ok=True)


def _control_plane_exists(settings: Any) -> bool:
    from seqexport_dagster.api import require_control_plane

    try:
        require_control_plane(settings)
    except ConfigurationError:
        return False
    return True


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], int] | None = None,
) -> int:
    """Run one command; returns its exit code. ``env`` and ``clock`` are for tests."""
    argv = list(sys.argv[1:] if argv is None else argv)
    out = Output("--json" in argv)
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        return out.error("invalid_input", str(exc), EXIT_BAD_INPUT, field=_usage_field(str(exc)))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    out.as_json = bool(args.json)
    args.environ = os.environ if env is None else env
    try:
        return _run(args, out, clock)
    except ExportError as exc:
        kind, code = exit_for(exc)
        return out.error(kind, exc.message, code, field=_error_field(exc))
    except KeyboardInterrupt:
        return out.error("interrupted", "interrupted", 130)
    except Exception as exc:  # the last line of defence: a message, never a traceback
        # Type and place only: a foreign exception's text may carry anything, a decrypted secret included.
        where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
        return out.error("internal", f"internal error {type(exc).__name__}{at}; please report it", EXIT_INTERNAL)


if __name__ == "__main__":
    raise SystemExit(main())
