"""The export error tree.

Third-party exceptions (botocore, SQLAlchemy, OS errors) are translated into these classes at
exactly one boundary each. The split that matters is retryable vs permanent: a retryable error may
be retried inside the run (Dagster RetryPolicy); a permanent one fails the run at once and waits for
the scheduler's backoff, with a message the customer can act on.
"""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from typing import Any, Final

#: Stored and shown error text is at most this many bytes of UTF-8: a store may answer anything, and
#: its words end up in the control plane, the ledger, the Dagster event log and a terminal.
ERROR_TEXT_LIMIT: Final = 1024
_TRUNCATED: Final = " [...]"
_BLANKS: Final = re.compile(r"\s+")


def sanitize_error(text: object, limit: int = ERROR_TEXT_LIMIT) -> str:
    """One printable line of at most ``limit`` UTF-8 bytes.

    Control characters (escape sequences included), line and paragraph separators and invisible
    format characters (bidi overrides) each become a space, runs of blanks one space; a cut is marked
    with ``[...]``. Applied where error text is stored (control plane, ledger) and again where it is
    shown (CLI, Dagster), so a row written before this existed is shown safely too.
    """
    cleaned = "".join(ch if ch.isprintable() else " " for ch in str(text))
    cleaned = _BLANKS.sub(" ", cleaned).strip()
    data = cleaned.encode("utf-8", "replace")
    if len(data) <= limit:
        return cleaned
    room = limit - len(_TRUNCATED.encode())
    return data[:room].decode("utf-8", "ignore").rstrip() + _TRUNCATED


def internal_error(exc: BaseException) -> str:
    """``internal error <Type> at <file>:<line>`` for an exception that is not ours.

    Type and place only, never the arguments: a foreign exception's text may carry anything, row
    data or a decrypted secret included. The runner stores this as a window's error; the CLI prints it.
    """
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {Path(where[0].filename).name}:{where[0].lineno}" if where else ""
    return f"internal error {type(exc).__name__}{at}"


class ExportError(Exception):
    """Base of every error the export core raises on purpose."""

    retryable: bool = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InvalidInput(ExportError):
    """A customer or operator value is wrong. Names the field and what it accepts."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class ConfigurationError(ExportError):
    """The operator's settings (``SEQEXPORT_DATABASE_URL`` and friends) are not usable."""


class UsageError(Exception):
    """The command line could not be parsed (argparse's complaint): exit code 2, not a SystemExit.

    Not an `ExportError`: it never leaves the CLI, and it carries no field of ours.
    """


class NotFound(ExportError):
    """The export (or another control-plane object) does not exist."""


class ConflictError(ExportError):
    """The operation does not apply to the export in its current state."""


class RetryableError(ExportError):
    """Transient: throttling, connection resets, 5xx, timeouts, a database briefly away."""

    retryable = True


class PermanentError(ExportError):
    """Will not heal by itself within a run; retried only by the scheduler's backoff."""


class UntypeableValue(PermanentError):
    """A source row holds a value the row contract cannot carry (`delivery.values`): the window stops
    here, in both formats, until the row is fixed at the source. Names the dataset, row id and field,
    never the value (it may be personal data); the runner adds the export and the window (`located`).
    """

    def __init__(self, dataset: str, row_id: str, field: str, accepted: str, where: str = "") -> None:
        self.dataset, self.row_id, self.field, self.accepted = dataset, row_id[:128], field, accepted
        super().__init__(
            f"{where}{dataset}: row {self.row_id!r}: field {field} holds a value that is not {accepted}; "
            "the window stops at this row and is not committed. Fix the row at the source (or the view "
            "the exporter reads); the export retries the window after its backoff"
        )

    def located(self, export_id: str, window: str) -> UntypeableValue:
        """The same error naming the export and the window."""
        return UntypeableValue(
            self.dataset, self.row_id, self.field, self.accepted, f"export {export_id}, window {window}: "
        )


class AccessDenied(PermanentError):
    """The credentials are valid but may not PutObject where we write.

    ``outcome_unknown``: the refused request was a re-send of a write whose first answer was lost,
    so the refusal may only mean "this key may not overwrite what the first send created".
    """

    outcome_unknown: bool = False


class RoleNotAssumable(AccessDenied):
    """STS refused to let us assume the customer's role: its trust policy does not name us, or its
    ``sts:ExternalId`` condition does not match this export's external id."""


class NoSuchBucket(PermanentError):
    """The bucket does not exist (or is not visible to these credentials)."""


class BadCredentials(PermanentError):
    """The access key is unknown or the secret does not match it."""


class ClockSkew(PermanentError):
    """The store refused our request time: the worker's clock is off."""


class EndpointRefused(PermanentError):
    """The endpoint is not one we may connect to (scheme, address or name)."""


class EndpointUnreachable(RetryableError):
    """The endpoint did not answer (DNS failure, refused or timed-out connection)."""


class EndpointTooSlow(PermanentError):
    """The store did not finish answering within the request deadline (connect + whole response).

    Permanent for the run: a store that drips its answer would hold the worker for every retry, so
    the export waits for the scheduler's backoff instead.
    """


class ResponseTooLarge(PermanentError):
    """An answer was far larger than any it may be (a store's to a PutObject, the HTTP API's to the
    remote CLI); the connection was dropped."""


class ObjectTooLarge(ExportError):
    """`seqexport verify`: an object, its decompressed content or one of its lines passed verify's
    bound (``--max-object-bytes``, ``--max-decompressed-bytes``, ``--max-line-bytes``); reported
    as a problem of that object, which is not read further."""


class ParquetProblem(ExportError):
    """`seqexport verify`: why a Parquet part's rows cannot be read; ``kind`` is the report's problem
    kind (``corrupt_parquet``, ``schema_mismatch``, ``too_many_lines``, ``too_large``), reported as a
    problem of that part, which is not read further."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


class ListingTooLong(InvalidInput):
    """`seqexport verify`: the listing passed ``--max-objects``; listing stopped there."""


class ConnectionTestFailed(ExportError):
    """The store refused (or never answered) the test write; nothing was saved.

    ``cause`` is the translated destination error, already in the customer's words (access denied
    for s3:PutObject on ..., no such bucket, bad signature, endpoint unreachable).
    """

    def __init__(self, location: str, cause: ExportError) -> None:
        super().__init__(f"connection test to {location} failed: {cause.message}; nothing was saved")
        self.location = location
        self.cause = cause
        self.retryable = cause.retryable


class RemoteConnectionTestFailed(ConnectionTestFailed):
    """The HTTP API's connection test failed (answered 422); its message is already complete."""

    def __init__(self, message: str) -> None:
        ExportError.__init__(self, message)


class RateLimited(ExportError):
    """Too many of one costly action (connection tests, webhook tests and adds, role setups, `store.rate_limit`)
    for one account in a short time, or too many webhook deliveries waiting; try again after ``retry_after_ms``."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        self.retry_after_ms = retry_after_ms


class TooManyRequests(ExportError):
    """The HTTP API's per-account write limit: answered 429 with ``Retry-After: retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unauthorized(ExportError):
    """The HTTP API request carried no valid token: answered 401."""

    def __init__(self) -> None:
        super().__init__("a valid API token is required: Authorization: Bearer sqx_...")


class RequestRefused(ExportError):
    """The HTTP API refused a request before routing it (too large, too slow, malformed body): ``status``."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class DestinationError(PermanentError):
    """Any other refusal by the store, passed on in the store's own words."""


class SecretKeyError(PermanentError):
    """The credential encryption keys are missing, malformed or cannot open a stored secret."""


class RunInterrupted(ExportError):
    """The export was paused or deleted while a run was writing. Not a failure."""

    def __init__(self, export_id: str, status: str) -> None:
        super().__init__(f"export {export_id} is {status}; stopped before the next file")
        self.export_id = export_id
        self.status = status


class LeaseLost(RunInterrupted):
    """Another run took over the export's writer lease (ours lapsed). Not a failure: stop writing."""

    def __init__(self, export_id: str) -> None:
        ExportError.__init__(
            self, f"export {export_id}: another run holds its writer lease; stopped before the next file"
        )
        self.export_id = export_id
        self.status = "leased elsewhere"


class DestinationChanged(Exception):
    """Internal signal between delivery and the runner, never shown: the export's destination changed
    during a window or snapshot, which restarts at the new place."""


#: BaseException's own ``__traceback__`` slot (a data descriptor), which `ExportFailed` sets through.
_BASE_TRACEBACK: Final[Any] = vars(BaseException)["__traceback__"]


class ExportFailed(Exception):
    """A run's exports failed for the reason in the message (customer-readable), which is an outcome
    the scheduler retries after its backoff, not a bug: it is shown without a traceback.

    The Dagster wiring raises it as an already-serialized error with no stack (`defs.run_failure`), so
    the run page shows ``ExportFailed: <message>`` on the step's row and on the run's. Anywhere else
    (a traceback printed by Python code that asks for it) this class answers None for
    ``__traceback__`` too: Python itself keeps and uses the real one. Our bugs are ordinary exceptions
    and keep their stack trace.

    ``__module__`` is "builtins" so the first line reads ``ExportFailed: <message>``, not a class path.
    """

    @property
    def __traceback__(self) -> None:  # shadows BaseException's on purpose
        return None

    @__traceback__.setter
    def __traceback__(self, value: object) -> None:
        _BASE_TRACEBACK.__set__(self, value)


ExportFailed.__module__ = "builtins"
