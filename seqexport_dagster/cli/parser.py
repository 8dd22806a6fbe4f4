"""The `seqexport` argument parser: commands, options and their help, and argparse made safe.

Each command's handler is set as a default: ``handler`` (a `commands` function, called with an API)
or ``plain_handler`` (a `tools` function, which opens what it needs).
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Final, NoReturn

from seqexport_dagster.cli import commands, maintain, tools, webhooks
from seqexport_dagster.cli.commands import Handler
from seqexport_dagster.cli.exits import EXIT_CODES_HELP
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.destination.redaction import option_names_only
from seqexport_dagster.errors import UsageError

#: Options whose field has another name in errors than the option's.
_OPTION_FIELDS: Final = {"lag-minutes": "lag", "secret-env": "secret", "secret-stdin": "secret"}
_USAGE_ARGUMENT_RE: Final = re.compile(r"^argument --([a-z-]+)[:/ ]")


def usage_field(message: str) -> str | None:
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
            options = option_names_only(rest.split())  # `--opt=value`: the value is never shown
            message = f"{head}unrecognized arguments: {' '.join(options) or '(values not shown)'}"
            if any(word in " ".join(options).lower() for word in ("secret", "password")):
                message += (
                    "; a secret is never a command-line value: use --secret-stdin, --secret-env NAME or the prompt"
                )
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _add_secret_options(p: argparse.ArgumentParser, *, prompt_flag: bool) -> None:
    group = p.add_argument_group("secret access key (never a command-line value)")
    group.add_argument("--secret-stdin", action="store_true", help="read the secret from the first line of stdin")
    group.add_argument("--secret-env", metavar="NAME", help="read the secret from environment variable NAME")
    if prompt_flag:
        group.add_argument("--secret-prompt", action="store_true", help="prompt for a new secret (same key id)")


def _add_encryption_options(p: argparse.ArgumentParser, *, clearable: bool) -> None:
    clear = " ('' for the bucket's default)" if clearable else " (default: the bucket's default encryption)"
    p.add_argument("--sse", help="server-side encryption of every object: AES256 or aws:kms" + clear)
    p.add_argument("--kms-key-id", help="with --sse aws:kms: the KMS key ARN (grant us kms:GenerateDataKey on it)")
    drop = " ('' to drop it; a new --access-key-id replaces it)" if clearable else ""
    p.add_argument("--role-arn", help="Amazon S3: a role to assume instead of an access key (see role-setup)" + drop)
    p.add_argument("--external-id", help="with --role-arn: the external id `seqexport role-setup` printed")


def _add_commands(sub: argparse._SubParsersAction[_Parser], common: _Parser) -> None:
    def command(name: str, handler: Handler, help_text: str, *, export_id: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, parents=[common])
        if export_id:
            p.add_argument("export_id", metavar="EXPORT_ID", help="the export, e.g. exp_0123456789abcdef")
        p.set_defaults(handler=handler)
        return p

    p = command(
        "create",
        commands.create,
        "create an export (tests the destination first; nothing is saved on failure)",
        export_id=False,
    )
    p.add_argument("--account", required=True, help="the Sequenzy account id")
    p.add_argument(
        "--provider", default="s3", help="s3 (AWS, or S3-compatible with --endpoint), gcs or azure (default s3)"
    )
    p.add_argument("--bucket", required=True, help="bucket name")
    p.add_argument("--prefix", default="", help="folder inside the bucket, e.g. sequenzy (default: the bucket root)")
    p.add_argument("--region", help="bucket region, e.g. us-east-1 (required for AWS)")
    p.add_argument("--endpoint", help="S3-compatible endpoint, e.g. https://<account-id>.r2.cloudflarestorage.com")
    p.add_argument(
        "--access-key-id",
        help="access key id (for gcs: the HMAC key's access id; for azure: the storage account's name, "
        "with the SAS token as the secret)",
    )
    _add_encryption_options(p, clearable=False)
    _add_secret_options(p, prompt_flag=False)
    p.add_argument("--datasets", default="all", help=f"comma-separated: {', '.join(DATASETS)} (default all)")
    p.add_argument("--frequency", default="1h", help="15m, 1h, 6h or 24h (default 1h)")
    p.add_argument(
        "--format", default="jsonl.gz", help="file format: jsonl.gz (gzip JSON Lines, default) or parquet (zstd)"
    )
    p.add_argument(
        "--table", default=None, help="delta: also keep a Delta Lake table per dataset (needs --format parquet)"
    )
    p.add_argument(
        "--lag-minutes", default="2", help="trail real time by this much so late writes are included (default 2)"
    )

    p = command(
        "role-setup",
        commands.role_setup,
        "generate the external id for a role export and print the trust policy to paste on the role",
        export_id=False,
    )
    p.add_argument("--account", required=True, help="the Sequenzy account id")

    p = command("list", commands.list_exports, "list exports", export_id=False)
    p.add_argument("--account", help="only this account's exports")
    p.add_argument("--all", action="store_true", help="include deleted exports")

    command("status", commands.status, "state, each dataset's position and delay, and the last error")
    command("pause", commands.pause, "pause an export; it keeps its position")
    command("resume", commands.resume, "resume a paused export; it catches up from its position with no gap")

    p = command("datasets", commands.datasets, "add or remove datasets (added ones start from now)", export_id=False)
    p.add_argument("action", choices=("add", "remove"), help="add or remove")
    p.add_argument("export_id", metavar="EXPORT_ID")
    p.add_argument("names", metavar="DATASETS", help=f"comma-separated: {', '.join(DATASETS)}")

    p = command(
        "destination",
        commands.destination,
        "move the export (bucket, prefix, endpoint) or rotate its keys; tests first",
    )
    p.add_argument("--provider", help="s3, gcs or azure")
    p.add_argument("--bucket")
    p.add_argument("--prefix", help="new prefix ('' for the bucket root)")
    p.add_argument("--region")
    p.add_argument("--endpoint", help="new endpoint ('' to go back to AWS)")
    p.add_argument("--access-key-id", help="new access key id (its secret is then required)")
    _add_encryption_options(p, clearable=True)
    _add_secret_options(p, prompt_flag=True)

    command("export-now", commands.export_now, "run now instead of waiting for the schedule; says why not if it cannot")
    p = command("frequency", commands.frequency, "change how often windows are written; the chain stays gap-free")
    p.add_argument("frequency", metavar="FREQUENCY", help="15m, 1h, 6h or 24h")
    p = command("table", commands.table, "keep a Delta Lake table per dataset (delta) or not (none)")
    p.add_argument("table", metavar="TABLE", help="delta or none")
    p = command("format", commands.file_format, "change the file format of new windows; no window is split")
    p.add_argument("format", metavar="FORMAT", help="jsonl.gz or parquet")
    command("init", commands.init, "create (or migrate) the control plane named by the configuration", export_id=False)
    command("history", commands.history, "every run of the last 14 days: rows, files, size and error")
    p = command("delete", commands.delete, "stop an export for good; files stay in the bucket, history stays readable")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation (scripts)")
    command(
        "maintain",
        maintain.maintain,
        "operators: compact history older than 14 days into day summaries; prune expired keys and leases",
        export_id=False,
    )
    p = command(
        "webhooks",
        webhooks.webhooks,
        "account webhooks: add (shows the signing secret once), list, remove, test (queued), enable (after "
        "the circuit breaker), rotate-secret (shows the new secret once), deliveries (the log), "
        "dispatch (operators: send due deliveries now)",
        export_id=False,
    )
    p.add_argument("action", choices=webhooks.ACTIONS, help="what to do")
    p.add_argument(
        "webhook_id",
        metavar="WEBHOOK_ID",
        nargs="?",
        help="for remove, test, enable, rotate-secret, deliveries: whk_...",
    )
    p.add_argument("--account", help="add: the Sequenzy account id; list: only this account's webhooks")
    p.add_argument("--url", help="add: the https:// URL that receives the events (a path and query are allowed)")
    p.add_argument("--events", help="add: comma-separated event types, or * for every type (default *)")
    p.add_argument("--description", help="add: a note for you (never sent)")
    p.add_argument(
        "--failing-after",
        help="add: consecutive failures of a dataset that send export.failing (1 to 100, default 3)",
    )
    p.add_argument("--limit", help="deliveries: how many, newest first (default 50); dispatch: at most (default 20)")
    command(
        "rotate-keys",
        commands.rotate_keys,
        "re-seal stored secrets with the first key of SEQEXPORT_SECRET_KEYS",
        export_id=False,
    )


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
    demo.set_defaults(plain_handler=tools.demo)
    verify = sub.add_parser(
        "verify",
        help="check a bucket prefix or local folder holds every window exactly once (read credentials)",
        description="Check windows chain without gaps or overlaps, parts, gzip, line limits, row order and "
        "windows, duplicate ids and each snapshot's _SUCCESS. Exits 7 if anything is wrong.",
        parents=[common],
    )
    verify.add_argument(
        "source",
        metavar="SOURCE",
        help="s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or a local folder",
    )
    verify.add_argument(
        "--endpoint", help="S3-compatible endpoint (R2, MinIO, B2); gs:// uses Google's; az:// the account's"
    )
    verify.add_argument("--region", help="bucket region (default us-east-1)")
    verify.add_argument(
        "--access-key-id",
        help="a read key (List + Get); default: your AWS credential chain. az://: the storage account's name, "
        "with a read SAS (sp=rl) as the secret",
    )
    _add_secret_options(verify, prompt_flag=False)
    verify.add_argument("--ledger", metavar="EXPORT_ID", help="operators: also compare rows per window with the ledger")
    verify.add_argument(
        "--until",
        metavar="WHEN",
        help="the manifests must prove every event dataset complete up to this UTC day or instant (2026-10-01)",
    )
    bounds = verify.add_argument_group("bounds (a broken or hostile bucket gets a clear answer, not a hang)")
    bounds.add_argument("--max-objects", metavar="N", default="200000", help="stop listing past N objects (200000)")
    bounds.add_argument(
        "--max-object-bytes", metavar="SIZE", default="64MiB", help="a larger part is a problem, not read (64MiB)"
    )
    bounds.add_argument(
        "--max-decompressed-bytes",
        metavar="SIZE",
        default="1GiB",
        help="a part decompressing to more is a problem, read no further (1GiB)",
    )
    bounds.add_argument(
        "--max-line-bytes", metavar="SIZE", default="1MiB", help="a part with a longer line is a problem (1MiB)"
    )
    verify.set_defaults(plain_handler=tools.verify)
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
    tokens.add_argument(
        "--expires-in-days", type=int, metavar="DAYS", help="create: the token stops working after DAYS days"
    )
    tokens.add_argument("--all", action="store_true", help="list: include revoked tokens")
    tokens.set_defaults(plain_handler=tools.tokens)
    serve_cmd = sub.add_parser("serve", help="run the HTTP API (uvicorn) over the control plane", parents=[common])
    serve_cmd.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve_cmd.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    serve_cmd.add_argument(
        "--write-limit",
        default="10/60",
        help="per account: destination writes (create, move) per seconds (default 10/60)",
    )
    serve_cmd.set_defaults(plain_handler=tools.serve)
    backfill = sub.add_parser(
        "backfill",
        help="operators: re-deliver days for chosen exports (create-only; never before an export's start)",
        parents=[common],
    )
    backfill.add_argument("--export", action="append", required=True, metavar="EXPORT_ID", help="repeatable")
    backfill.add_argument("--from", dest="start", required=True, metavar="YYYY-MM-DD", help="first UTC day")
    backfill.add_argument("--to", dest="end", required=True, metavar="YYYY-MM-DD", help="last UTC day (inclusive)")
    backfill.add_argument("--datasets", help=f"comma-separated (default all): {', '.join(DATASETS)}")
    backfill.add_argument(
        "--redeliver",
        action="store_true",
        help="the bucket lost files: send every recorded file of the days again, create-only "
        "(a name still there is left as it is; a missing one is written)",
    )
    backfill.set_defaults(plain_handler=tools.backfill)
    _add_commands(sub, common)
    return parser
