"""Snowflake's external stage over an export's prefix: shared by the JSONL and the Parquet statements."""

from __future__ import annotations


def snowflake_stage(*, stage: str = "sequenzy_stage", uri: str = "s3://acme-exports/sequenzy") -> str:
    """The external stage every COPY reads through. ``FILE_FORMAT = (TYPE = JSON)`` is what makes COPY
    parse each line as one JSON document; without it Snowflake reads the parts as CSV. Gzip is
    detected by itself (``COMPRESSION = AUTO``)."""
    return (
        f"CREATE STAGE IF NOT EXISTS {stage}\n"
        f"  URL = '{uri}/'\n"
        f"  CREDENTIALS = (AWS_KEY_ID = 'AKIA...' AWS_SECRET_KEY = '...')  -- or STORAGE_INTEGRATION = <name>\n"
        f"  FILE_FORMAT = (TYPE = JSON);"
    )
