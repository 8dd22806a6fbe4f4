"""What verify reads on Azure Blob: ``az://container/prefix``, listed with List Blobs, read with Get Blob.

The customer's own tool, with a read SAS (``sp=rl``: read and list) on the container: List and Get
are fine here (the exporter itself only ever creates blobs). The account is ``--access-key-id``
(its name), the endpoint defaults to ``https://<account>.blob.core.windows.net``. Every answer is
bounded as the S3 reader's: a listing page past `bucket.MAX_PAGE_BYTES` and an object past the
verify limit are refused as they are read. Nothing here echoes the SAS token.
"""

from __future__ import annotations

import builtins
import email.utils
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from seqexport_dagster.contract.keys import MANIFEST_FOLDER
from seqexport_dagster.contract.schema import DATASETS
from seqexport_dagster.destination.azure_errors import azure_answer
from seqexport_dagster.destination.azure_sas import (
    API_VERSION,
    account_endpoint,
    normalize_sas,
    redact_sas,
    validate_account,
)
from seqexport_dagster.errors import ExportError, InvalidInput, ListingTooLong
from seqexport_dagster.management.verify.bounds import DEFAULT_LIMITS, Limits
from seqexport_dagster.management.verify.bucket import MAX_PAGE_BYTES, Bucket, Listed, StoredObject, _capped


def open_azure_bucket(
    source: str,
    *,
    s3_endpoint: str | None = None,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    region: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
    on_listed: Listed | None = None,
) -> Bucket:
    """``az://container/prefix``, with `bucket.open_bucket`'s arguments: the account is
    ``access_key_id``, the read SAS ``secret_access_key``; Azure has no region to give."""
    match = re.match(r"^az://([^/]+)/?(.*)$", source)
    if not match:
        raise InvalidInput("source", f"{source!r}: use az://container/prefix")
    if region:
        raise InvalidInput("region", "an az:// source has no region to give; leave it out")
    bucket = AzureBucket(
        match.group(1), match.group(2), endpoint=s3_endpoint, account=access_key_id, sas=secret_access_key
    )
    bucket.limits = limits
    if on_listed is not None:
        bucket.on_listed = on_listed
    return bucket


class AzureBucket(Bucket):
    """An Azure Blob container prefix, read through a SAS token that may read and list."""

    def __init__(
        self, container: str, prefix: str, *, endpoint: str | None, account: str | None, sas: str | None
    ) -> None:
        import urllib3

        if not sas:
            raise InvalidInput("secret", "an az:// source needs a SAS token that may read and list (sp=rl)")
        self.account = validate_account(account)
        self.container = container
        self.prefix = prefix.strip("/")
        base = (endpoint or account_endpoint(self.account)).rstrip("/")
        host = (urlsplit(base).hostname or "").lower()
        path = "" if host.startswith(f"{self.account}.") else f"/{self.account}"
        self._url = f"{base}{path}/{container}"
        self._sas = normalize_sas(sas)
        self.source = f"az://{container}/{self.prefix}".rstrip("/")
        self._http = urllib3.PoolManager(maxsize=16, timeout=urllib3.Timeout(connect=10, read=60))
        self._headers = {"x-ms-version": API_VERSION}

    def _full(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _pages(self) -> Iterator[builtins.list[StoredObject]]:
        for name in DATASETS:
            yield from self._folder_pages(name + "/", self.source)

    def _manifest_pages(self) -> Iterator[builtins.list[StoredObject]]:
        return self._folder_pages(MANIFEST_FOLDER + "/", f"{self.source}/{MANIFEST_FOLDER}/")

    def _folder_pages(self, folder: str, what: str) -> Iterator[builtins.list[StoredObject]]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        marker = ""
        while True:
            query = {"restype": "container", "comp": "list", "prefix": self._full(folder), "maxresults": "1000"}
            if marker:
                query["marker"] = marker
            body = self._get(f"{self._url}?{urlencode(query)}", MAX_PAGE_BYTES, f"cannot list {what}", page=True)
            try:
                root = ET.fromstring(body)
            except ET.ParseError:
                raise ExportError(f"cannot list {what}: the store's answer is not a blob listing") from None
            yield [_stored(blob, strip) for blob in root.iter("Blob")]
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return

    def read(self, key: str, limit: int | None = None) -> bytes:
        bound = self.limits.max_object_bytes if limit is None else limit
        return self._get(f"{self._url}/{quote(self._full(key), safe='/')}", bound, key)

    def _get(self, url: str, limit: int, what: str, *, page: bool = False) -> bytes:
        joiner = "&" if "?" in url else "?"
        try:
            response: Any = self._http.request(
                "GET", f"{url}{joiner}{self._sas}", headers=self._headers, preload_content=False, redirect=False
            )
        except Exception as exc:  # urllib3's tree: named by type only (its text quotes the URL)
            raise ExportError(f"{what}: {type(exc).__name__} reaching {redact_sas(self._url)}") from None
        try:
            if response.status != 200:
                answer = azure_answer(response.status, dict(response.headers), response.read(16 * 1024))
                raise ExportError(
                    f"{what}: {answer.code or answer.status}" + (f": {answer.message}" if answer.message else "")
                )
            if page:
                body = response.read(limit + 1)
                if len(body) > limit:
                    raise ListingTooLong(
                        "max_objects",
                        f"the store answered one listing page of more than {limit:,} bytes; not read further",
                    )
                return bytes(body)
            return _capped(response.read, limit, "the store")
        finally:
            response.release_conn()

    def close(self) -> None:
        self._http.clear()


def _stored(blob: ET.Element, strip: int) -> StoredObject:
    name = blob.findtext("Name") or ""
    size = int(blob.findtext("Properties/Content-Length") or 0)
    modified = email.utils.parsedate_to_datetime(
        blob.findtext("Properties/Last-Modified") or "Thu, 01 Jan 1970 00:00:00 GMT"
    )
    return StoredObject(name[strip:], size, int(modified.timestamp() * 1e9))
