"""What verify reads: a local folder or an S3-family prefix, listed once and read object by object.

The customer's own tool: List and Get are fine here (the exporter itself only ever PUTs), and their
default credential chain is used when no key is given. Storage failures leave this module as our
`ExportError`, named by the destination's one botocore boundary (`s3_errors.error_summary`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from seqexport_dagster.destination.config import AUTO_REGION, GCS_ENDPOINT, endpoint_region
from seqexport_dagster.destination.s3_errors import error_summary
from seqexport_dagster.errors import ExportError, InvalidInput
from seqexport_dagster.schema import DATASETS


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str  # relative to the verified prefix
    size: int
    modified_ns: int


class Bucket:
    """What verify needs from a location: list once, read each object."""

    source: str

    def list(self) -> list[StoredObject]:
        raise NotImplementedError

    def read(self, key: str) -> bytes:
        raise NotImplementedError

    def close(self) -> None:
        return None


class LocalBucket(Bucket):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.source = str(root)

    def list(self) -> list[StoredObject]:
        if not self.root.is_dir():
            raise InvalidInput("source", f"{self.root} is not a folder")
        found = []
        for name in DATASETS:
            folder = self.root / name
            if not folder.is_dir():
                continue
            for dirpath, _dirs, files in os.walk(folder):
                for file in files:
                    path = Path(dirpath) / file
                    stat = path.stat()
                    found.append(StoredObject(path.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime_ns))
        return found

    def read(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except OSError as exc:
            raise ExportError(type(exc).__name__) from exc


class S3Bucket(Bucket):
    """An S3 or S3-compatible prefix (GCS through HMAC keys with ``gs://``)."""

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        scheme: str,
        endpoint: str | None,
        access_key_id: str | None,
        secret_access_key: str | None,
        region: str | None,
    ) -> None:
        import boto3
        from botocore.config import Config

        if scheme == "gs" and not endpoint:
            endpoint = GCS_ENDPOINT
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.source = f"{scheme}://{bucket}/{self.prefix}".rstrip("/")
        # The customer's own tool: their default credential chain is fine when no key is given.
        session = boto3.session.Session(
            aws_access_key_id=access_key_id or None,
            aws_secret_access_key=secret_access_key or None,
            # As the exporter signs: "auto" on GCS and R2, us-east-1 on other stores and by default on AWS.
            region_name=region or (AUTO_REGION if scheme == "gs" else endpoint_region(endpoint or "")),
        )
        style: Literal["path", "auto"] = "path" if endpoint else "auto"
        self.client = session.client(
            "s3",
            endpoint_url=endpoint,
            config=Config(
                signature_version="s3v4",
                s3={"addressing_style": style},
                retries={"mode": "standard", "max_attempts": 5},
                max_pool_connections=16,
            ),
        )

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def list(self) -> list[StoredObject]:
        found = []
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            for name in DATASETS:
                pages = self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=self._full(name + "/")
                )
                for page in pages:
                    for obj in page.get("Contents", []):
                        modified = obj["LastModified"].timestamp()
                        found.append(StoredObject(obj["Key"][strip:], int(obj["Size"]), int(modified * 1e9)))
        except Exception as exc:  # botocore's tree, named by the destination's boundary
            raise ExportError(f"cannot list {self.source}: {error_summary(exc)}") from exc
        return found

    def read(self, key: str) -> bytes:
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"].read()
        except Exception as exc:  # botocore's tree, named by the destination's boundary
            raise ExportError(error_summary(exc)) from exc
        return body

    def close(self) -> None:
        self.client.close()


def open_bucket(
    source: str,
    *,
    s3_endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    region: str | None = None,
) -> Bucket:
    """``s3://bucket/prefix``, ``gs://bucket/prefix``, ``file:///path`` or a plain folder path."""
    match = re.match(r"^(s3|gs)://([^/]+)/?(.*)$", source)
    if match:
        return S3Bucket(
            match.group(2),
            match.group(3),
            scheme=match.group(1),
            endpoint=s3_endpoint,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            region=region,
        )
    if "://" in source and not source.startswith("file://"):
        raise InvalidInput("source", f"{source!r}: use s3://bucket/prefix, gs://bucket/prefix or a local folder")
    return LocalBucket(Path(source.removeprefix("file://")).expanduser().resolve())


def prefetch(bucket: Bucket, objects: list[StoredObject], workers: int) -> Iterator[bytes | Exception]:
    """Read objects in order with a few reads in flight; memory stays at ``workers`` parts."""

    def read(key: str) -> bytes | Exception:
        try:
            return bucket.read(key)
        except Exception as exc:  # reported per object; one unreadable part must not stop verify
            return exc

    if workers <= 1:
        for obj in objects:
            yield read(obj.key)
        return
    with ThreadPoolExecutor(workers) as pool:
        pending: list[Future[bytes | Exception]] = []
        for obj in objects:
            pending.append(pool.submit(read, obj.key))
            if len(pending) >= workers:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()
