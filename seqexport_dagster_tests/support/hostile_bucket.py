"""A hostile S3 bucket on 127.0.0.1, in its own process: what `seqexport verify` may be pointed at.

``python -m seqexport_dagster_tests.support.hostile_bucket PORT MODE``. It answers ListObjectsV2
(path-style, ``encoding-type=url``) and GetObject for bucket ``hostile``, keys under
``email_events/`` only, as MODE says:

``bomb``      one part: 1 MB of gzip that decompresses to 1 GiB of zero bytes (one endless line)
``longline``  one part: 1 MB of gzip that decompresses to one 1 GiB JSON-looking line
``huge``      one part listed (and served) as 1 GiB
``liar``      one part listed as 200 bytes, served as 1 GiB
``million``   1,000,000 parts (hourly windows), in pages of 1,000; each one a valid empty gzip
``endless``   a listing that never ends: every page says there is more
``bigpage``   a listing whose one page holds 100,000 keys (about 25 MB of XML; a store sends 1,000)
``pagebomb``  a listing whose first page never ends: 1 GiB declared, keys streamed until the client hangs up
``evil``      one object whose key clears the screen, returns the cursor and forges a verdict
``manifestlist`` one valid empty part, and a manifest listing (``_sequenzy/manifests/``) that never ends
``bigmanifest`` one valid empty part, and 3 manifests of about 64 MiB each (JSON listing 450,000 parts)

Bodies are generated as they are sent; nothing of the 1 GiB is held in memory.
"""

from __future__ import annotations

import datetime as dt
import gzip
import socket
import struct
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit
from xml.sax.saxutils import escape as xml_escape

BUCKET = "hostile"
GIB = 1024 * 1024 * 1024
PAGE = 1000
MILLION = 1_000_000
DAY0_MS = int(dt.datetime(2026, 9, 30, tzinfo=dt.UTC).timestamp() * 1000)
HOUR_MS = 3_600_000
#: What the ``evil`` key shows on a terminal that obeys it: a cleared screen and a fake verdict.
EVIL_KEY = "email_events/date=2026-09-30/\x1b[2J\x1b[H\rALL WINDOWS OK\x1b[8m"
EMPTY_GZIP = gzip.compress(b"")
MANIFESTS = "_sequenzy/manifests/"


def part_key(n: int) -> str:
    start = DAY0_MS + n * HOUR_MS
    day = dt.datetime.fromtimestamp(start / 1000, dt.UTC).date().isoformat()
    return f"email_events/date={day}/email_events-{start}-{start + HOUR_MS}-0000.jsonl.gz"


def manifest_key(n: int) -> str:
    start = DAY0_MS + n * HOUR_MS
    day = dt.datetime.fromtimestamp(start / 1000, dt.UTC).date().isoformat()
    return f"{MANIFESTS}email_events/date={day}/email_events-{start}-{start + HOUR_MS}-through-0000.json"


def _big_manifest() -> bytes:
    """A well-formed manifest of about 64 MiB: what a naive reader parses whole and keeps."""
    entry = (
        '{"key": "email_events/date=2026-09-30/email_events-%d-%d-%04d.jsonl.gz", "part": 0, "rows": 0, '
        '"bytes": 20, "md5": null}'
    )
    parts = ",\n".join(entry % (DAY0_MS, DAY0_MS + HOUR_MS, n) for n in range(450_000))
    return (
        '{"format": "sequenzy-manifest/1", "dataset": "email_events", "date": "2026-09-30", '
        f'"window": {{"from_ms": {DAY0_MS}, "to_ms": {DAY0_MS + HOUR_MS}}}, "chain_from_ms": {DAY0_MS}, '
        f'"rows": 0, "bytes": 0, "parts": [{parts}]}}'
    ).encode()


def _bomb(head: bytes, fill: bytes, mebibytes: int = 1024) -> bytes:
    """One gzip member of ``head`` then ``fill`` repeated to 1 GiB (about 1 MB), in a quarter of a
    CPU-second: deflating the whole GiB took 3. Each MiB is flushed with ``Z_FULL_FLUSH``, which
    forgets the history, so every MiB after the first deflates to the same bytes: deflated once,
    repeated, framed with the CRC-32 and length of the whole."""
    block = fill * (1024 * 1024 // len(fill))
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate: the gzip frame is ours
    first = packer.compress(head) + packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(head)
    for _ in range(mebibytes):
        crc = zlib.crc32(block, crc)
    size = len(head) + mebibytes * len(block)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"  # gzip, deflate, no name, no mtime, best compression
    trailer = struct.pack("<II", crc, size & 0xFFFFFFFF)
    return header + first + again * (mebibytes - 1) + packer.flush() + trailer


class Bucket:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.body: bytes | None = None
        if mode == "bomb":
            self.body = _bomb(b"", b"\0")
        elif mode == "longline":
            self.body = _bomb(b'{"id":"', b"a")
        self.manifest = _big_manifest() if mode == "bigmanifest" else b""

    def listing(self, prefix: str, start: int) -> tuple[list[tuple[str, int]], int | None]:
        """(key, size) of one page from ``start``, and where the next page starts (None: the end)."""
        if prefix.startswith(MANIFESTS) and self.mode == "manifestlist":
            return [(manifest_key(n), 900) for n in range(start, start + PAGE)], start + PAGE
        if prefix.startswith(MANIFESTS) and self.mode == "bigmanifest":
            return [(manifest_key(n), len(self.manifest)) for n in range(3)], None
        if not prefix.startswith("email_events/"):
            return [], None
        if self.mode in ("manifestlist", "bigmanifest"):
            return [(part_key(0), len(EMPTY_GZIP))], None
        if self.mode == "million":
            end = min(start + PAGE, MILLION)
            return [(part_key(n), len(EMPTY_GZIP)) for n in range(start, end)], (end if end < MILLION else None)
        if self.mode == "bigpage":
            return [(part_key(n), len(EMPTY_GZIP)) for n in range(100_000)], None
        if self.mode == "endless":
            return [(part_key(n), len(EMPTY_GZIP)) for n in range(start, start + PAGE)], start + PAGE
        if self.mode == "evil":
            return [(EVIL_KEY, 3)], None
        size = {"huge": GIB, "liar": 200}.get(self.mode, len(self.body or b""))
        return [(part_key(0), size)], None

    def chunks(self, key: str) -> Iterator[bytes]:
        if key.startswith(MANIFESTS):
            yield self.manifest
        elif self.body is not None:
            yield self.body
        elif self.mode in ("huge", "liar"):
            block = b"\x1f" * (1024 * 1024)
            for _ in range(1024):
                yield block
        elif self.mode == "evil":
            yield b"hi\n"
        else:
            yield EMPTY_GZIP

    def length(self, key: str) -> int:
        if key.startswith(MANIFESTS):
            return len(self.manifest)
        if self.body is not None:
            return len(self.body)
        return {"huge": GIB, "liar": GIB, "evil": 3}.get(self.mode, len(EMPTY_GZIP))


def listing_xml(prefix: str, page: list[tuple[str, int]], after: int | None) -> bytes:
    contents = "".join(
        f"<Contents><Key>{xml_escape(quote(key, safe='/='))}</Key><LastModified>2026-09-30T01:00:00.000Z"
        f'</LastModified><ETag>"e"</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>'
        for key, size in page
    )
    more = f"<IsTruncated>true</IsTruncated><NextContinuationToken>{after}</NextContinuationToken>" if after else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>{BUCKET}</Name><Prefix>{quote(prefix, safe='/=')}</Prefix><KeyCount>{len(page)}</KeyCount>"
        f"<MaxKeys>{PAGE}</MaxKeys><EncodingType>url</EncodingType>"
        f"{more or '<IsTruncated>false</IsTruncated>'}{contents}</ListBucketResult>"
    ).encode()


def handler_for(bucket: Bucket) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            path = url.path.lstrip("/")
            name, _, key = path.partition("/")
            query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
            try:
                if name == BUCKET and not key and "list-type" in query and bucket.mode == "pagebomb":
                    self._endless_page(query.get("prefix", ""))
                elif name == BUCKET and not key and "list-type" in query:
                    start = int(query.get("continuation-token") or 0)
                    page, after = bucket.listing(query.get("prefix", ""), start)
                    self.send(200, listing_xml(query.get("prefix", ""), page, after), "application/xml")
                elif name == BUCKET and key:
                    from urllib.parse import unquote

                    key = unquote(key)
                    self.send_response(200)
                    self.send_header("Content-Length", str(bucket.length(key)))
                    self.send_header("Content-Type", "application/gzip")
                    self.end_headers()
                    for chunk in bucket.chunks(key):
                        self.wfile.write(chunk)
                else:
                    self.send(404, b"<Error><Code>NoSuchKey</Code><Message>no</Message></Error>", "application/xml")
            except OSError:
                self.close_connection = True  # the client hung up: what a bounded client does

        def _endless_page(self, prefix: str) -> None:
            head = listing_xml(prefix, [], None).removesuffix(b"</ListBucketResult>")
            self.send_response(200)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(GIB))
            self.end_headers()
            self.wfile.write(head)
            batch = listing_xml(prefix, [(part_key(n), len(EMPTY_GZIP)) for n in range(PAGE)], None)
            contents = batch[batch.index(b"<Contents>") : batch.rindex(b"</Contents>") + len(b"</Contents>")]
            sent = len(head)
            while sent < GIB:  # until the client hangs up (OSError, caught by do_GET)
                self.wfile.write(contents)
                sent += len(contents)

        def do_HEAD(self) -> None:
            self.send(200, b"", "application/xml")

        def send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main(argv: list[str]) -> int:
    port, mode = int(argv[0]), argv[1]
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(Bucket(mode)))
    server.daemon_threads = True
    server.serve_forever()
    return 0


@dataclass(frozen=True)
class HostileBucket:
    endpoint: str
    source: str = f"s3://{BUCKET}"


@contextmanager
def running(mode: str) -> Iterator[HostileBucket]:
    """The bucket in its own process group on a free port; stopped with its group."""
    from seqexport_dagster_tests.support.moto_server import free_port
    from seqexport_dagster_tests.support.processes import group_process

    port = free_port()
    command = [sys.executable, "-m", "seqexport_dagster_tests.support.hostile_bucket", str(port), mode]
    with group_process(command, grace_s=2) as process:
        deadline = time.monotonic() + 60  # an interpreter start, slow on a loaded host
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the hostile bucket did not start") from None
                time.sleep(0.05)
        yield HostileBucket(f"http://127.0.0.1:{port}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
