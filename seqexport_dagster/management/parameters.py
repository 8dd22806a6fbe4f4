"""What the operations of `api.Exports` and `remote.RemoteExports` take besides plain values.

Kept apart from both so that the remote CLI (`remote`) shares these types without importing the
database-backed `api`, and with it SQLAlchemy and the control plane (issue 40).
"""

from __future__ import annotations

from collections.abc import Callable

#: A line for the person waiting ("testing the connection ..."): the CLI prints it, others drop it.
Progress = Callable[[str], None]
#: A secret access key, or a callable that asks for it (called after every other value is valid).
Secret = str | Callable[[], str | None] | None


def quiet(_: str) -> None:
    """The `Progress` of a caller that shows nothing."""
    return None
