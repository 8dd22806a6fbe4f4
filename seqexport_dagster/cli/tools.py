"""The commands that open what they need themselves: the demo, verify, API tokens, the API server
and operators' backfill. Management commands (`commands`) get an API from `app` instead.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqexport_dagster.cli import render
from seqexport_dagster.cli.commands import read_secret
from seqexport_dagster.cli.exits import EXIT_INTERNAL, EXIT_OK, EXIT_VERIFY_FAILED
from seqexport_dagster.cli.render import Output
from seqexport_dagster.errors import InvalidInput, sanitize_error
from seqexport_dagster.progress import Advance, Reporter, reporter

if TYPE_CHECKING:
    from seqexport_dagster.cli.commands import AnyExports
    from seqexport_dagster.management.verify.bounds import Limits


def demo(args: argparse.Namespace) -> int:
    from seqexport_dagster.demo.run import run_demo

    with reporter(bool(args.json)) as shown:
        summary = run_demo(
            Path(args.home), Path(args.dest_dir) if args.dest_dir else None, progress=shown.line, advance=shown.advance
        )
    if args.json:
        render.demo_json(summary)
    else:
        render.demo_summary(summary, summary.duckdb_counts())
    return EXIT_OK


def verify(args: argparse.Namespace) -> int:
    """Customer-side: checks a bucket with the customer's read key; the ledger only for operators."""
    from seqexport_dagster.management.verify import verify_location

    out = Output(bool(args.json))
    limits = verify_limits(args)
    secret = read_secret(args, out, required=bool(args.access_key_id))
    ledger: Any = None
    api: AnyExports | None = None
    if args.ledger and args.environ.get("SEQEXPORT_API_URL"):
        # Customers: the ledger comes from the HTTP API (their token), the bucket from their read key.
        from seqexport_dagster.management.remote import RemoteExports

        api = RemoteExports.from_env(args.environ)
        ledger = (api, api.get_export(args.ledger).id)
    elif args.ledger:
        from seqexport_dagster.delivery.settings import Settings
        from seqexport_dagster.management.api import Exports

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
                progress=listing_lines(shown),
                limits=limits,
                until_ms=until_ms(args.until),
            )
    finally:
        if api is not None:
            api.close()
    out.line(report.to_json() if out.as_json else report.render())
    return EXIT_OK if report.ok else EXIT_VERIFY_FAILED


def verify_limits(args: argparse.Namespace) -> Limits:
    from seqexport_dagster.management.verify.bounds import Limits, parse_count, parse_size

    return Limits(
        max_objects=parse_count("max_objects", args.max_objects),
        max_object_bytes=parse_size("max_object_bytes", args.max_object_bytes),
        max_decompressed_bytes=parse_size("max_decompressed_bytes", args.max_decompressed_bytes),
        max_line_bytes=parse_size("max_line_bytes", args.max_line_bytes),
    )


#: A long listing says how far it got on stderr, bars or not, every this many objects.
LISTING_LINE_EVERY = 25_000


def listing_lines(shown: Reporter) -> Advance:
    """``shown.advance``, plus a line on stderr every `LISTING_LINE_EVERY` objects listed."""

    said = [0]

    def advance(what: str, done: int, total: int | None) -> None:
        shown.advance(what, done, total)
        if what == "objects listed" and done >= said[0] + LISTING_LINE_EVERY:
            said[0] = done - done % LISTING_LINE_EVERY
            shown.line(f"listed {done:,} objects so far ...")

    return advance


def until_ms(text: str | None) -> int | None:
    """``--until``: a UTC day (its midnight) or an ISO instant with an offset."""
    if not text:
        return None
    from seqexport_dagster.contract.window import parse_iso_ms

    value = text.strip()
    if len(value) == 10:
        value += "T00:00:00Z"
    try:
        return parse_iso_ms(value)
    except ValueError:
        raise InvalidInput(
            "until", f"{sanitize_error(repr(text), 40)} is not a UTC day (2026-10-01) or instant (2026-10-01T06:00:00Z)"
        ) from None


def local_only(args: argparse.Namespace, what: str) -> None:
    if args.environ.get("SEQEXPORT_API_URL"):
        raise InvalidInput(
            "SEQEXPORT_API_URL", f"{what} needs the control-plane database; unset SEQEXPORT_API_URL and run it there"
        )


def tokens(args: argparse.Namespace) -> int:
    """Operators mint, list and revoke API tokens; a token's value is printed once, at creation."""
    from seqexport_dagster.clock import wall_clock_ms
    from seqexport_dagster.contract.validation import validate_account
    from seqexport_dagster.delivery.settings import Settings
    from seqexport_dagster.management.api import Exports
    from seqexport_dagster.store.token import TokenStore

    local_only(args, "managing tokens")
    out = Output(bool(args.json))
    if args.action == "create" and bool(args.account) == bool(args.operator):
        raise InvalidInput("account", "give --account ACCOUNT for an account token, or --operator (sees every account)")
    if args.action == "revoke" and not args.token_id:
        raise InvalidInput("token_id", "give the id of the token to revoke (see `seqexport tokens list`)")
    if args.account:
        validate_account(args.account)
    if args.expires_in_days is not None and args.action != "create":
        raise InvalidInput("expires-in-days", "only `tokens create` takes an expiry")
    # An existing control plane only: a mistyped SEQEXPORT_HOME must not mint a token nobody's server reads.
    api = Exports.from_settings(Settings.from_env(args.environ), must_exist=True)
    try:
        store = TokenStore(api.store.engine)
        if args.action == "create":
            value, token = store.create(
                account_id=args.account,
                now_ms=wall_clock_ms(),
                name=args.name or "",
                expires_in_days=args.expires_in_days,
            )
            out.secrets.append(value.rsplit("_", 1)[1])
            render.token_created(out, token, value)
        elif args.action == "revoke":
            render.token_revoked(out, store.revoke(args.token_id, wall_clock_ms()))
        else:
            render.token_list(out, store.list(account_id=args.account, include_revoked=args.all))
        return EXIT_OK
    finally:
        api.close()


def serve(args: argparse.Namespace) -> int:
    from seqexport_dagster.delivery.settings import Settings
    from seqexport_dagster.service.guard import RateLimit
    from seqexport_dagster.service.server import serve as run_server

    local_only(args, "serving the API")
    if not 0 < args.port < 65536:
        raise InvalidInput("port", f"{args.port} is not a TCP port (1-65535)")
    run_server(
        Settings.from_env(args.environ), host=args.host, port=args.port, write_limit=RateLimit.parse(args.write_limit)
    )
    return EXIT_OK


def backfill(args: argparse.Namespace) -> int:
    """Operators: re-deliver days for chosen exports (create-only; never before an export's start)."""
    import uuid

    from seqexport_dagster.clock import wall_clock_ms
    from seqexport_dagster.delivery.assembly import open_source
    from seqexport_dagster.delivery.backfill import backfill as run_backfill
    from seqexport_dagster.delivery.batch import DONE
    from seqexport_dagster.delivery.settings import Settings
    from seqexport_dagster.management.api import Exports

    local_only(args, "seqexport backfill")
    out = Output(bool(args.json))
    settings = Settings.from_env(args.environ)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()] if args.datasets else []
    api = Exports.from_settings(settings)
    source = open_source(settings)
    try:
        report = run_backfill(
            api.store,
            source,
            settings.policy,
            args.export,
            args.start,
            args.end,
            clock=wall_clock_ms,
            datasets=datasets,
            holder=f"seqexport-backfill-{uuid.uuid4().hex[:8]}",
            redeliver=bool(args.redeliver),
        )
    finally:
        source.engine.dispose()
        api.close()
    render.backfill_report(out, args.start, args.end, report, redeliver=bool(args.redeliver))
    return EXIT_OK if all(o.status == DONE for o in report.outcomes.values()) else EXIT_INTERNAL
