"""Where parts land: one `Destination` protocol, an S3-family and a local-directory implementation."""

from __future__ import annotations

from seqexport_dagster.destination.base import (
    Destination,
    DestinationConfig,
    OperatorPolicy,
    open_destination,
)

__all__ = ["Destination", "DestinationConfig", "OperatorPolicy", "open_destination"]
