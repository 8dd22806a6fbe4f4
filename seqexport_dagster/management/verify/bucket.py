"""What verify reads: a local folder or an S3-family prefix, listed once and read object by object.

The customer's own tool: List and Get are fine here (the exporter itself only ever PUTs), and their
default credential chain is used when no key is given. Storage failures leave this module as our
`ExportError`, named by the destination's one botocore boundary (`s3_errors.error_summary`).
What is listed and read stays within `verify.bounds.Limits` (listing size, object size, bytes in flight).
"""

from __future__ import annotations

import builtins
import os
import re
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from seqexport_dagster.contract.keys import MANIFEST_FOLDER
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.destination.config import AUTO_REGION, GCS_ENDPOINT, endpoint_region
from seqexport_dagster.destination.s3_errors import error_summary
from seqexport_dagster.errors import ExportError, InvalidInput, ListingTooLong, ObjectTooLarge
from seqexport_dagster.management.verify.bounds import DEFAULT_LIMITS, Limits, size_text

if TYPE_CHECKING:  # botocore is imported when an S3 location is opened, not with the CLI
    from botocore.awsrequest import AWSPreparedRequest, AWSResponse


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str  # relative to the verified prefix
    size: int
    modified_ns: int


#: Told the number of objects listed so far, after each page (each 1,000 objects of a folder).
Listed = Callable[[int], None]


class Bucket:
    """What verify needs from a location: list once, read each object, within `Limits`."""

    source: str
    limits: Limits = DEFAULT_LIMITS
    on_listed: Listed | None = None

    def list(self) -> list[StoredObject]:
        """Every object under the dataset folders; `ListingTooLong` past ``limits.max_objects``."""
        found: builtins.list[StoredObject] = []
        cap = self.limits.max_objects
        for page in self._pages():
            found.extend(page)
            if len(found) > cap:
                raise ListingTooLong(
                    "max_objects",
                    f"{self.source} holds more than {cap:,} objects; listing stopped there. Verify a narrower "
                    "prefix (one dataset or one date= folder) or raise --max-objects "
                    "(verify holds about 500 MB per million objects)",
                )
            if self.on_listed is not None:
                self.on_listed(len(found))
        return found

    def list_manifests(self, listed: int = 0) -> builtins.list[StoredObject]:
        """Every window manifest below the prefix (keys relative to it). They count with the
        ``listed`` objects of the dataset folders against ``limits.max_objects``: an endless
        manifest listing stops there like any other (issue 41: it ignored the bound)."""
        found: builtins.list[StoredObject] = []
        cap = self.limits.max_objects
        for page in self._manifest_pages():
            found.extend(page)
            if listed + len(found) > cap:
                raise ListingTooLong(
                    "max_objects",
                    f"{self.source} holds more than {cap:,} objects, window manifests ({MANIFEST_FOLDER}/) "
                    "included; listing stopped there. Verify a narrower prefix (one dataset or one date= "
                    "folder) or raise --max-objects (verify holds about 500 MB per million objects)",
                )
            if self.on_listed is not None:
                self.on_listed(listed + len(found))
        return found

    def _pages(self) -> Iterator[builtins.list[StoredObject]]:
        raise NotImplementedError

    def _manifest_pages(self) -> Iterator[builtins.list[StoredObject]]:
        """Pages of the manifest folder's listing; none for a location that keeps none."""
        return iter(())

    def read(self, key: str, limit: int | None = None) -> bytes:
        """The object's bytes; `ObjectTooLarge` once more than ``limit`` (default: the bound) arrive."""
        raise NotImplementedError

    def read_listed(self, obj: StoredObject, bound: int | None = None) -> bytes:
        """An object as listed: refused unread past the bound (``bound``, or ``--max-object-bytes``),
        and never read past its listed size."""
        limit = self.limits.max_object_bytes if bound is None else bound
        if obj.size > limit:
            option = " (--max-object-bytes)" if bound is None else ""
            raise ObjectTooLarge(f"{obj.size:,} bytes; the bound is {size_text(limit)}{option}, not read")
        return self.read(obj.key, obj.size)

    def close(self) -> None:
        return None


def _capped(read: Callable[[int], bytes], limit: int, what: str) -> bytes:
    """At most ``limit`` bytes from ``read(n)``; `ObjectTooLarge` if there is more."""
    body = read(limit + 1)
    if len(body) > limit:
        raise ObjectTooLarge(f"{what} sends more than {limit:,} bytes; not read further")
    return body


class LocalBucket(Bucket):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.source = str(root)

    def _pages(self) -> Iterator[builtins.list[StoredObject]]:
        if not self.root.is_dir():
            raise InvalidInput("source", f"{self.root} is not a folder")
        return self._walk_pages([self.root / name for name in DATASETS])

    def _manifest_pages(self) -> Iterator[builtins.list[StoredObject]]:
        return self._walk_pages([self.root / MANIFEST_FOLDER])

    def _walk_pages(self, folders: builtins.list[Path]) -> Iterator[builtins.list[StoredObject]]:
        """Every file under ``folders`` (a missing one has none), in pages of 1,000 as S3 lists them;
        always at least one page, perhaps empty."""
        page: builtins.list[StoredObject] = []
        for folder in folders:
            for dirpath, _dirs, files in os.walk(folder):
                for file in files:
                    path = Path(dirpath) / file
                    stat = path.stat()
                    page.append(StoredObject(path.relative_to(self.root).as_posix(), stat.st_size, stat.st_mtime_ns))
                    if len(page) == 1000:
                        yield page
                        page = []
        yield page

    def read(self, key: str, limit: int | None = None) -> bytes:
        try:
            with (self.root / key).open("rb") as file:
                return _capped(file.read, self.limits.max_object_bytes if limit is None else limit, "the file")
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
        # botocore reads a listing page whole; one far past 1,000 keys is refused as it is read.
        send = _bounded_page_sender(self.client)
        self.client.meta.events.register("before-send.s3.ListObjectsV2", send)  # type: ignore[arg-type]  # returns the answer

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _pages(self) -> Iterator[builtins.list[StoredObject]]:
        for name in DATASETS:
            yield from self._folder_pages(name + "/", self.source)

    def _manifest_pages(self) -> Iterator[builtins.list[StoredObject]]:
        return self._folder_pages(MANIFEST_FOLDER + "/", f"{self.source}/{MANIFEST_FOLDER}/")

    def _folder_pages(self, folder: str, what: str) -> Iterator[builtins.list[StoredObject]]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._full(folder), PaginationConfig={"PageSize": 1000}
            )
            for page in pages:
                yield [
                    StoredObject(obj["Key"][strip:], int(obj["Size"]), int(obj["LastModified"].timestamp() * 1e9))
                    for obj in page.get("Contents", [])
                ]
        except ExportError:
            raise
        except Exception as exc:  # botocore's tree, named by the destination's boundary
            raise ExportError(f"cannot list {what}: {error_summary(exc)}") from exc

    def read(self, key: str, limit: int | None = None) -> bytes:
        try:
            stream = self.client.get_object(Bucket=self.bucket, Key=self._full(key))["Body"]
            try:
                return _capped(stream.read, self.limits.max_object_bytes if limit is None else limit, "the store")
            finally:
                stream.close()  # drops the connection instead of draining what was not read
        except ExportError:
            raise
        except Exception as exc:  # botocore's tree, named by the destination's boundary
            raise ExportError(error_summary(exc)) from exc

    def close(self) -> None:
        self.client.close()


#: A page of 1,000 keys is about 300 KB of XML (1.3 MB if every key is 1,024 bytes long); a page
#: larger than this is not a store's answer, and is refused before botocore parses it.
MAX_PAGE_BYTES: Final = 4 * 1024 * 1024


class _BoundedPage:
    """A listing answer's raw stream (urllib3's) that stops past `MAX_PAGE_BYTES`.

    botocore reads a listing answer whole before anything else sees it, so a check after the read
    (``before-parse``) came too late: a 24 MB page already cost 90 MB, and a page that never ends
    would have cost everything. botocore joins what `stream` yields; this stops as it passes the bound.
    """

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def stream(self, amt: int = 2**16, decode_content: bool | None = None) -> Iterator[bytes]:
        total = 0
        for chunk in self.raw.stream(amt, decode_content=decode_content):
            total += len(chunk)
            if total > MAX_PAGE_BYTES:
                self.raw.close()  # drop the connection rather than drain the rest
                raise ListingTooLong(
                    "max_objects",
                    f"the store answered one listing page of more than {MAX_PAGE_BYTES:,} bytes "
                    "(1,000 keys are about 300 KB); not read further",
                )
            yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def _bounded_page_sender(client: Any) -> Callable[..., AWSResponse]:
    """A ``before-send`` handler for ListObjectsV2: sends the request itself, streamed, and hands
    botocore an answer whose body reads through `_BoundedPage`."""
    from botocore.awsrequest import AWSResponse

    session = client._endpoint.http_session  # the client's own (timeouts, pool, proxies): no public handle

    def send(request: AWSPreparedRequest, **_: object) -> AWSResponse:
        request.stream_output = True  # so the session does not read the body whole
        response = session.send(request)
        return AWSResponse(response.url, response.status_code, response.headers, _BoundedPage(response.raw))

    return send


def open_bucket(
    source: str,
    *,
    s3_endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    region: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    on_listed: Listed | None = None,
) -> Bucket:
    """``s3://bucket/prefix``, ``gs://bucket/prefix``, ``file:///path`` or a plain folder path
    (``az://`` is `azure_bucket.open_azure_bucket`'s)."""
    bucket = _open(source, s3_endpoint, access_key_id, secret_access_key, region)
    bucket.limits = limits
    if on_listed is not None:
        bucket.on_listed = on_listed
    return bucket


def _open(
    source: str, s3_endpoint: str | None, access_key_id: str | None, secret_access_key: str | None, region: str | None
) -> Bucket:
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
        raise InvalidInput(
            "source", f"{source!r}: use s3://bucket/prefix, gs://bucket/prefix, az://container/prefix or a local folder"
        )
    return LocalBucket(Path(source.removeprefix("file://")).expanduser().resolve())


def prefetch(
    bucket: Bucket, objects: list[StoredObject], workers: int, bound: int | None = None
) -> Iterator[bytes | Exception]:
    """Read objects in order with a few reads in flight: at most ``workers`` of them, and at most
    ``limits.in_flight_bytes`` (as listed; always at least one) besides the one being checked.
    ``bound``: each object's own (default ``--max-object-bytes``; manifests have a smaller one)."""
    limit = bucket.limits.max_object_bytes if bound is None else bound

    def read(obj: StoredObject) -> bytes | Exception:
        try:
            return bucket.read_listed(obj, bound)
        except Exception as exc:  # reported per object; one unreadable part must not stop verify
            return exc

    if workers <= 1:
        for obj in objects:
            yield read(obj)
        return
    budget = bucket.limits.in_flight_bytes
    with ThreadPoolExecutor(workers) as pool:
        pending: deque[tuple[int, Future[bytes | Exception]]] = deque()
        held = 0
        for obj in objects:
            size = obj.size if obj.size <= limit else 0  # refused unread
            while pending and (len(pending) >= workers or held + size > budget):
                done, fut = pending.popleft()
                held -= done
                yield fut.result()
            pending.append((size, pool.submit(read, obj)))
            held += size
        for _, fut in pending:
            yield fut.result()
