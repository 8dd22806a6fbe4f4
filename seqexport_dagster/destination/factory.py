"""Opening a `Destination` from a config: the one place that picks the implementation.

The implementations are imported when first needed, so validating a config or importing the
package never loads botocore.
"""

from __future__ import annotations

from seqexport_dagster.destination.base import Destination
from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy, require_local_allowed


def open_destination(config: DestinationConfig, policy: OperatorPolicy) -> Destination:
    if config.provider == "local":
        require_local_allowed(policy)
        from seqexport_dagster.destination.local import LocalDestination

        return LocalDestination(config.bucket)
    if config.provider == "azure":
        from seqexport_dagster.destination.azure import AzureDestination

        return AzureDestination(config, policy)
    from seqexport_dagster.destination.s3 import S3Destination

    return S3Destination(config, policy)
