"""A real Azurite (Microsoft's Azure Storage emulator, from npm) on 127.0.0.1, for tests and demos.

`.ci/prepare-test` installs it into ``.ci/node`` (pinned). It runs in memory, in its own process
group, on a free port; its account is Azurite's published development account, whose key is
public (it is in Microsoft's docs), so the SAS tokens signed here are test values, never secrets.

SAS tokens are computed here from that key (HMAC-SHA256 over Azure's string-to-sign), so the tests
need no Azure SDK: a service SAS on one container (``sr=c``) with the permissions a test asks for,
and an account SAS for the test's own set-up and reading back (create a container, list, get).
"""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import hashlib
import hmac
import io
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqexport_dagster_tests.support.moto_server import free_port
from seqexport_dagster_tests.support.processes import ROOT, start_group, stop_group

#: Azurite's development account (https://learn.microsoft.com/azure/storage/common/storage-use-azurite).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
SAS_VERSION = "2021-08-06"
AZURITE = ROOT / ".ci" / "node" / "node_modules" / ".bin" / "azurite-blob"


def _stamp(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sign(string_to_sign: str, key: str = ACCOUNT_KEY) -> str:
    digest = hmac.new(base64.b64decode(key), string_to_sign.encode("utf-8"), hashlib.sha256).digest()
    return base64.b64encode(digest).decode("ascii")


def container_sas(
    container: str,
    permissions: str = "c",
    *,
    expiry: dt.datetime | None = None,
    key: str = ACCOUNT_KEY,
    account: str = ACCOUNT,
) -> str:
    """A service SAS on ``container`` (``sr=c``), as a customer pastes it (no leading ``?``)."""
    start = _stamp(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
    end = _stamp(expiry or dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    resource = f"/blob/{account}/{container}"
    # Permissions, start, expiry, resource, identifier, IP, protocol, version, resource type,
    # snapshot time, encryption scope, then the five response-header overrides.
    fields = [permissions, start, end, resource, "", "", "https,http", SAS_VERSION, "c", "", "", "", "", "", "", ""]
    query = {"sv": SAS_VERSION, "st": start, "se": end, "sr": "c", "sp": permissions, "spr": "https,http"}
    query["sig"] = _sign("\n".join(fields), key)
    return urllib.parse.urlencode(query, safe=":")


def signature(sas: str) -> str:
    """The ``sig=`` value of a SAS token: what must never be shown anywhere."""
    return sas.split("sig=", 1)[1].split("&", 1)[0]


def account_sas(permissions: str = "racwdl") -> str:
    """An account SAS over blobs, containers and the service: the test's own admin key."""
    start = _stamp(dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
    end = _stamp(dt.datetime.now(dt.UTC) + dt.timedelta(hours=6))
    fields = [ACCOUNT, permissions, "b", "sco", start, end, "", "https,http", SAS_VERSION, ""]
    query = {"sv": SAS_VERSION, "ss": "b", "srt": "sco", "sp": permissions, "st": start, "se": end, "spr": "https,http"}
    query["sig"] = _sign("\n".join(fields) + "\n")
    return urllib.parse.urlencode(query, safe=":")


@dataclass
class Azurite:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def endpoint(self) -> str:
        """What an export's endpoint is set to: path-style, the account is the first path segment."""
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str, query: str = "") -> str:
        sas = account_sas()
        return f"{self.endpoint}/{ACCOUNT}/{urllib.parse.quote(path)}?" + "&".join(q for q in (query, sas) if q)

    def _call(self, method: str, path: str, query: str = "", data: bytes | None = None) -> Any:
        request = urllib.request.Request(self.url(path, query), data=data, method=method)
        request.add_header("x-ms-version", SAS_VERSION)
        if method == "PUT" and query == "":
            request.add_header("x-ms-blob-type", "BlockBlob")
        return _no_proxy_opener().open(request, timeout=10)

    def create_container(self, name: str) -> None:
        with self._call("PUT", name, "restype=container"):
            pass

    def listing(self, container: str, prefix: str = "") -> list[dict[str, Any]]:
        """Every blob under ``prefix``: name, size, last modified and Content-MD5, as List Blobs gives them."""
        found: list[dict[str, Any]] = []
        marker = ""
        while True:
            query = "restype=container&comp=list&" + urllib.parse.urlencode({"prefix": prefix, "marker": marker})
            with self._call("GET", container, query) as answer:
                root = ET.fromstring(answer.read())
            for blob in root.iter("Blob"):
                modified = blob.findtext("Properties/Last-Modified") or "Thu, 01 Jan 1970 00:00:00 GMT"
                found.append(
                    {
                        "Key": blob.findtext("Name") or "",
                        "Size": int(blob.findtext("Properties/Content-Length") or 0),
                        "LastModified": email.utils.parsedate_to_datetime(modified),
                        "ContentMD5": blob.findtext("Properties/Content-MD5") or "",
                        "BlobType": blob.findtext("Properties/BlobType") or "",
                    }
                )
            marker = root.findtext("NextMarker") or ""
            if not marker:
                return found

    def blobs(self, container: str, prefix: str = "") -> dict[str, bytes]:
        """Every blob under ``prefix`` with its content (the test reads back what was written)."""
        return {b["Key"]: self.get(container, b["Key"]) for b in self.listing(container, prefix)}

    def s3_view(self) -> S3View:
        return S3View(self)

    def get(self, container: str, name: str) -> bytes:
        with self._call("GET", f"{container}/{name}") as answer:
            return bytes(answer.read())

    def properties(self, container: str, name: str) -> dict[str, str]:
        with self._call("HEAD", f"{container}/{name}") as answer:
            return {k.lower(): v for k, v in answer.headers.items()}

    def put(self, container: str, name: str, body: bytes) -> None:
        """A plain overwrite with the admin SAS (a test planting an object)."""
        with self._call("PUT", f"{container}/{name}", data=body):
            pass

    def stop(self) -> None:
        stop_group(self.process, grace_s=5)


class S3View:
    """The two calls `bucket_audit` makes of an S3 client, answered from Azurite, so the fault suite's
    audit (every source row found once, verify clean) reads an Azure container unchanged."""

    def __init__(self, server: Azurite) -> None:
        self.server = server

    def get_paginator(self, name: str) -> S3View:
        assert name == "list_objects_v2"
        return self

    def paginate(self, Bucket: str, Prefix: str = "") -> Iterator[dict[str, Any]]:  # boto3's keyword names
        yield {"Contents": self.server.listing(Bucket, Prefix)}

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # boto3's keyword names
        return {"Body": io.BytesIO(self.server.get(Bucket, Key))}


def _no_proxy_opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def installed() -> bool:
    return AZURITE.exists()


def start(workdir: Path, timeout: float = 30.0) -> Azurite:
    """Azurite's blob service in memory on a free port of 127.0.0.1 (telemetry off)."""
    if not installed():
        raise RuntimeError(f"{AZURITE} is missing: run .ci/prepare-test (it installs Azurite from npm)")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("HTTP_PROXY", "HTTPS_PROXY"))}
    command = [
        str(AZURITE),
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--inMemoryPersistence",
        "--skipApiVersionCheck",
        "--disableTelemetry",
        "--silent",
    ]
    process = start_group(command, cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = Azurite(port=port, process=process)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"azurite exited with {process.returncode}")
        try:
            with _no_proxy_opener().open(f"{server.endpoint}/{ACCOUNT}?comp=list&{account_sas()}", timeout=2):
                return server
        except urllib.error.HTTPError:
            return server  # it answers: up
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"azurite did not answer on port {port} within {timeout}s") from None
            time.sleep(0.1)
