"""The export-management commands: each is one call into `Exports` (or `RemoteExports`) and one view.

A handler takes the parsed arguments, the API and the output; it returns the exit code. Which API
it gets (the control-plane database, or the HTTP API with ``SEQEXPORT_API_URL``) is decided in
`seqexport_dagster.cli.app`; both have the same methods.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from seqexport_dagster.cli import render
from seqexport_dagster.cli.exits import EXIT_OK, EXIT_UNAVAILABLE
from seqexport_dagster.cli.render import Output
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.errors import InvalidInput, sanitize_error
from seqexport_dagster.progress import reporter

if TYPE_CHECKING:
    # The API pulls in SQLAlchemy and Alembic (about a second); `seqexport --help` must not wait.
    from seqexport_dagster.management.api import Exports
    from seqexport_dagster.management.remote import RemoteExports

    #: The database (`Exports`) or the HTTP API (`RemoteExports`, with SEQEXPORT_API_URL): same methods.
    AnyExports = Exports | RemoteExports

Handler = Callable[[argparse.Namespace, "AnyExports", Output], int]


def read_secret(args: argparse.Namespace, out: Output, *, required: bool) -> str | None:
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
            # Never named: people paste the secret itself here, and a secret can look like a name
            # (an upper-case key of letters and digits does).
            raise InvalidInput(
                "secret",
                "the environment variable given with --secret-env is not set or empty (--secret-env takes the "
                "variable's NAME, not the secret; what you gave is not repeated here, in case it is the secret)",
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


def lag_ms(minutes: str) -> int:
    """``--lag-minutes`` as milliseconds; the API checks the range."""
    shown = sanitize_error(repr(minutes), 80)
    try:
        value = float(minutes)
    except ValueError:
        raise InvalidInput("lag", f"{shown} is not a number of minutes (0 to 60)") from None
    if not -1e6 <= value <= 1e6:  # NaN and infinities fail too; 1e308 minutes would overflow below
        raise InvalidInput("lag", f"{shown} minutes is out of range: use 0 to 60 minutes")
    from seqexport_dagster.contract.validation import validate_lag_ms

    return validate_lag_ms(int(round(value * 60_000)))


def create(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    datasets = list(DATASETS) if args.datasets.strip() == "all" else args.datasets
    record = api.create(
        account_id=args.account,
        provider=args.provider,
        bucket=args.bucket,
        prefix=args.prefix,
        region=args.region,
        endpoint=args.endpoint,
        access_key_id=args.access_key_id,
        secret_access_key=lambda: read_secret(args, out, required=args.provider != "local" and not args.role_arn),
        datasets=datasets,
        frequency=args.frequency,
        lag_ms=lag_ms(args.lag_minutes),
        sse=args.sse,
        kms_key_id=args.kms_key_id,
        role_arn=args.role_arn,
        external_id=args.external_id,
        progress=out.progress,
        file_format=args.format,
        table=args.table,
    )
    render.created(out, record)
    return EXIT_OK


def role_setup(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    render.role_setup(out, api.role_setup(args.account))
    return EXIT_OK


def list_exports(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    render.export_list(out, api.list(account_id=args.account, include_deleted=args.all), include_deleted=args.all)
    return EXIT_OK


def status(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    render.export_status(out, api.status(args.export_id))
    return EXIT_OK


def pause(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    render.changed(out, api.pause(args.export_id), "paused (position kept)")
    return EXIT_OK


def resume(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    render.changed(out, api.resume(args.export_id), "resumed (catches up from its position)")
    return EXIT_OK


def export_now(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    if not hasattr(api, "export_now_plan"):  # the remote CLI: the HTTP API answers with the export
        render.changed(out, api.export_now(args.export_id), "will run at the next scheduler tick (no backoff wait)")
        return EXIT_OK
    plan = api.export_now_plan(args.export_id)
    from seqexport_dagster.defs.daemon_health import daemon_warning

    warning = daemon_warning(args.environ)
    if warning:
        out.progress(f"warning: {warning}")
    render.export_now_plan(out, plan, warning)
    return EXIT_OK


def frequency(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    before = api.status(args.export_id).export.frequency
    record = api.change_frequency(args.export_id, args.frequency)
    if before == record.frequency:
        render.export_changed(
            out, record, f"Export {record.id} already runs every {record.frequency}; nothing changed."
        )
        return EXIT_OK
    render.export_changed(
        out,
        record,
        f"Export {record.id} now runs every {record.frequency}; each dataset continues from its position "
        "to the next point of the new grid, with no gap.",
    )
    return EXIT_OK


def confirm_delete(args: argparse.Namespace, api: AnyExports) -> None:
    if args.yes:
        return
    record = api.status(args.export_id).export
    if not sys.stdin.isatty():
        raise InvalidInput(
            "confirmation",
            f"deleting export {record.id} needs confirmation: pass --yes (scripts) or run it in a terminal",
        )
    print(
        f"Delete export {record.id} of {record.account_id} ({render.where(record)})? It stops for good; "
        "files stay in the bucket.",
        file=sys.stderr,
    )
    answer = input("Type the export id to confirm: ").strip()
    if answer != record.id:
        raise InvalidInput("confirmation", "not confirmed: nothing was deleted")


def delete(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    confirm_delete(args, api)
    record = api.delete(args.export_id)
    render.changed(out, record, "deleted; files already written stay in the bucket, history stays readable")
    return EXIT_OK


def init(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    from seqexport_dagster.delivery.assembly import shown_url

    where = shown_url(args.settings.database_url)
    if out.as_json:
        out.json({"database_url": where, "created": not args.existed})
    elif args.existed:
        out.line(f"Control plane at {where} already exists; its schema is up to date.")
    else:
        out.line(f"Created the control plane at {where}.")
    return EXIT_OK


def datasets(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    if args.action == "add":
        record = api.add_datasets(args.export_id, args.names)
        verb = f"now also exports {args.names} (from now on)"
    else:
        record = api.remove_datasets(args.export_id, args.names)
        verb = f"no longer exports {args.names} (files stay)"
    render.export_changed(
        out,
        record,
        f"Export {record.id} {verb}; datasets: {', '.join(d.dataset for d in record.datasets)}.",
    )
    return EXIT_OK


def destination(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
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
        secret_access_key=(lambda: read_secret(args, out, required=needs_secret)) if asked else None,
        sse=args.sse,
        kms_key_id=args.kms_key_id,
        role_arn=args.role_arn,
        external_id=args.external_id,
        progress=out.progress,
    )
    render.export_changed(
        out,
        record,
        f"Export {record.id} now writes to {render.where(record)}; it continues from its position there.",
    )
    return EXIT_OK


def history(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    render.run_history(out, api.history(args.export_id))
    return EXIT_OK


def rotate_keys(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    out.progress("re-sealing stored secrets with the first key of SEQEXPORT_SECRET_KEYS ...")
    from seqexport_dagster.management.remote import RemoteExports  # the HTTP client only: no database

    with reporter(out.as_json) as shown:
        # Progress where the work happens: a remote rotation runs in the server.
        report = api.rotate_keys() if isinstance(api, RemoteExports) else api.rotate_keys(progress=shown.advance)
    return EXIT_OK if render.rotation(out, report) else EXIT_UNAVAILABLE


def table(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    record = api.change_table(args.export_id, args.table)
    what = f"keeps a {record.table} table per dataset" if record.table else "keeps no table (the log written stays)"
    render.export_changed(out, record, f"Export {record.id} now {what}, from each dataset's next commit.")
    return EXIT_OK


def file_format(args: argparse.Namespace, api: AnyExports, out: Output) -> int:
    record = api.change_format(args.export_id, args.format)
    render.export_changed(
        out,
        record,
        f"Export {record.id} now writes {record.format} files from each dataset's next window; windows already "
        "started keep their format, so none is split.",
    )
    return EXIT_OK
