"""Where parts land: one `Destination` protocol, an S3-family and a local-directory implementation.

The modules, from the bottom up (none imports one above it):

- `policy`: what an operator allows (`OperatorPolicy`);
- `endpoint`: which endpoints a customer may name, and where we actually connect;
- `config`: `DestinationConfig`, the providers and the validation of a customer's values;
- `base`: the `Destination` protocol;
- `local`, `s3` (with `s3_client`, `s3_transport`, `s3_deadline`, `s3_errors`), `azure` (with
  `azure_sas`, `azure_errors`; it sends through `s3_transport`): the implementations;
- `factory`: opens the right implementation for a config.
"""

from __future__ import annotations

from seqexport_dagster.destination.base import Destination, PutOutcome, content_md5
from seqexport_dagster.destination.config import DestinationConfig, Provider, validate_config, validate_provider
from seqexport_dagster.destination.factory import open_destination
from seqexport_dagster.destination.policy import OperatorPolicy

__all__ = [
    "Destination",
    "DestinationConfig",
    "OperatorPolicy",
    "Provider",
    "PutOutcome",
    "content_md5",
    "open_destination",
    "validate_config",
    "validate_provider",
]
