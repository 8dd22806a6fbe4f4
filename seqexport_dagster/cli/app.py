"""`main`: parse, open the API the command needs, run its handler, and turn errors into exit codes.

Errors from our error tree become stable exit codes (`exits.ERROR_EXITS`); anything else is a bug
and still never prints a traceback or a secret.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from seqexport_dagster.cli.exits import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, error_field, exit_for, internal_message
from seqexport_dagster.cli.parser import build_parser, usage_field
from seqexport_dagster.cli.render import Output
from seqexport_dagster.errors import ConfigurationError, ExportError, UsageError

if TYPE_CHECKING:
    from seqexport_dagster.cli.commands import AnyExports, Handler
    from seqexport_dagster.delivery.settings import Settings


def _run(args: argparse.Namespace, out: Output, clock: Callable[[], int] | None) -> int:
    plain: Callable[[argparse.Namespace], int] | None = getattr(args, "plain_handler", None)
    if plain is not None:
        return int(plain(args))
    api: AnyExports
    if args.environ.get("SEQEXPORT_API_URL"):
        # Only the HTTP client: the remote mode never opens the database, so it never imports
        # SQLAlchemy or the control plane (test_remote_cli_imports keeps it so; issue 40).
        from seqexport_dagster.management.remote import RemoteExports

        api = RemoteExports.from_env(args.environ)
    else:
        from seqexport_dagster.delivery.settings import Settings
        from seqexport_dagster.management.api import Exports
        from seqexport_dagster.store.database import make_sqlite_folder

        settings = Settings.from_env(args.environ)
        # Only these may bring a control plane into being: a typo elsewhere must not make an empty one.
        must_exist = args.command not in ("create", "init")
        if args.command == "init":
            args.settings = settings
            args.existed = _control_plane_exists(settings)
        if not must_exist:
            settings.secret_box()  # keys fail closed before any folder or file comes into being
            make_sqlite_folder(settings.database_url)
        kwargs: dict[str, Any] = {"must_exist": must_exist}
        if clock:
            kwargs["clock"] = clock
        api = Exports.from_settings(settings, **kwargs)
    try:
        handler: Handler = args.handler
        return handler(args, api, out)
    finally:
        api.close()


def _control_plane_exists(settings: Settings) -> bool:
    from seqexport_dagster.delivery.assembly import require_control_plane

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
        return out.error("invalid_input", str(exc), EXIT_BAD_INPUT, field=usage_field(str(exc)))
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    out.as_json = bool(args.json)
    args.environ = os.environ if env is None else env
    try:
        return _run(args, out, clock)
    except ExportError as exc:
        kind, code = exit_for(exc)
        return out.error(kind, exc.message, code, field=error_field(exc))
    except KeyboardInterrupt:
        return out.error("interrupted", "interrupted", 130)
    except Exception as exc:  # the last line of defence: a message, never a traceback
        return out.error("internal", internal_message(exc), EXIT_INTERNAL)
