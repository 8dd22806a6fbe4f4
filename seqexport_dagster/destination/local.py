"""A local directory as a destination, for the demo and tests.

Writes are atomic (temporary file in the same folder, fsync, then a hard link for a create-only
write or a rename for a replace), so a reader never sees half a file, exactly as an object store
behaves, and create-only writes behave like ``If-None-Match: *``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from seqexport_dagster.destination.base import PutOutcome
from seqexport_dagster.errors import DestinationError, InvalidInput


class LocalDestination:
    preconditions = True

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root not in path.parents:
            raise InvalidInput("key", f"{key!r} would leave the destination folder")
        return path

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        path = self._path(key)
        outcome = PutOutcome.CREATED
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # The temporary file lives outside every dataset folder: nothing but parts and
            # _SUCCESS may ever appear there, not even for a moment.
            staging = self.root / ".seqexport-tmp"
            staging.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=staging, suffix=".part")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(body)
                    handle.flush()
                    os.fsync(handle.fileno())
                if create_only:
                    try:
                        os.link(tmp, path)  # fails if the name exists: never replaces
                    except FileExistsError:
                        outcome = PutOutcome.EXISTED
                    Path(tmp).unlink()
                else:
                    os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise DestinationError(f"cannot write {path}: {exc.strerror or exc}") from exc
        return outcome

    def describe(self) -> str:
        return f"file://{self.root}"

    def close(self) -> None:
        return None
