"""The connection test: prove we can write where an export points, before anything is saved.

It writes one small text file under ``<prefix>/_sequenzy/`` (outside every dataset folder, so a
loader globbing ``<dataset>/`` never sees it) through the same `Destination` protocol the runner
uses. That is the only operation the customer's policy grants, so a passing test means the first
export will not fail for lack of rights, a missing bucket or a wrong key. We cannot delete the file
afterwards (no ``s3:DeleteObject``); its text says it is safe to delete.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from seqexport_dagster.contract.keys import connection_test_key
from seqexport_dagster.contract.window import iso_ms
from seqexport_dagster.destination import Destination, DestinationConfig, OperatorPolicy, open_destination
from seqexport_dagster.errors import ConnectionTestFailed, ExportError

DestinationFactory = Callable[[DestinationConfig, OperatorPolicy], Destination]


@dataclass(frozen=True, slots=True)
class ConnectionTestResult:
    key: str
    location: str
    written_at: int
    elapsed_ms: int


def connection_test_body(written_at: int, token: str) -> bytes:
    return (
        "Sequenzy Data Exports connection test.\n"
        f"Written at {iso_ms(written_at)} (token {token}) to check that Sequenzy may write here.\n"
        "Loaders never read this folder. This file is safe to delete.\n"
    ).encode()


def run_connection_test(
    config: DestinationConfig,
    policy: OperatorPolicy,
    *,
    now_ms: int,
    token: str | None = None,
    destination_factory: DestinationFactory = open_destination,
) -> ConnectionTestResult:
    """Write the connection test file to ``config``'s destination; raise `ConnectionTestFailed`.

    ``config`` must already be validated (`validate_config`): this function contacts the store, it
    does not judge the customer's input. The token is random so that two tests never overwrite each
    other and a reader can tell which test wrote which file.
    """
    token = token or secrets.token_hex(8)
    key = connection_test_key(config.prefix, token)
    location = config.describe()
    started = time.monotonic()
    destination: Destination | None = None
    try:
        destination = destination_factory(config, policy)
        destination.put(key, connection_test_body(now_ms, token))
    except ExportError as exc:
        raise ConnectionTestFailed(location, exc) from None
    finally:
        if destination is not None:
            destination.close()
    return ConnectionTestResult(key, location, now_ms, int((time.monotonic() - started) * 1000))
