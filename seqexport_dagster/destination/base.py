"""The `Destination` protocol: what every place parts land in can do.

A destination knows one operation, ``put``: the exporter only ever creates objects (the customer's
policy grants ``s3:PutObject`` and nothing else). Keys given to ``put`` are complete object keys,
prefix included; `seqexport_dagster.contract.keys` builds them.

Write-once: ``put`` creates and never replaces, unless an operator asked to replace. Where the store
offers a create-only precondition (``preconditions``), every create carries it, and an object that
is already there comes back as `PutOutcome.EXISTED` instead of being overwritten.
"""

from __future__ import annotations

import base64
import hashlib
from enum import StrEnum
from typing import Protocol


class PutOutcome(StrEnum):
    CREATED = "created"
    #: The store refused the create-only write because the key exists: an earlier attempt landed it.
    EXISTED = "existed"


class Destination(Protocol):
    #: Whether the store enforces create-only writes (a precondition), so a re-sent part answers
    #: `PutOutcome.EXISTED` instead of replacing (or, on a create-only key, being refused 403).
    preconditions: bool

    def put(self, key: str, body: bytes, *, create_only: bool = True) -> PutOutcome:
        """Write ``body`` under ``key`` atomically; raise an `ExportError` on refusal.

        ``create_only`` (the default, and all the runner ever asks for outside an operator's
        replace) never replaces an object where the store can enforce it.
        """

    def describe(self) -> str:
        """Where this writes, for people: ``s3://bucket/prefix``. Never includes a secret."""

    def close(self) -> None:
        """Release connections."""


def content_md5(body: bytes) -> str:
    """Base64 MD5 of ``body``: the ``Content-MD5`` every PUT carries, and what the part ledger records."""
    return base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode("ascii")
