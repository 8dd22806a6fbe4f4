"""S3Destination cost against a local moto server, next to a plain boto3 client.

Prints the construction time (first in the process, then the median of later ones) and the median
per-PUT time for a small and a ~1 MiB body, for `S3Destination` and for a default boto3 client.
moto's server answers ``Connection: close``, so every PUT of either client opens a new connection.

    .venv/bin/python -m benchmarks.s3_destination [--puts 50] [--constructions 20]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import statistics
import time
from collections.abc import Callable
from typing import Any, cast

import boto3
from botocore.config import Config

from seqexport_dagster.destination.config import DestinationConfig
from seqexport_dagster.destination.policy import OperatorPolicy
from seqexport_dagster.destination.s3 import S3Destination
from seqexport_dagster_tests.support import moto_server

LOCAL = OperatorPolicy(allow_local=True)
BUCKET = "bench"


def _ms(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=50)
    parser.add_argument("--constructions", type=int, default=20)
    args = parser.parse_args()
    server = moto_server.start()
    try:
        server.admin_client().create_bucket(Bucket=BUCKET)
        config = DestinationConfig(
            "s3", BUCKET, prefix="p", endpoint=server.endpoint, access_key_id="AKIABENCH", secret_access_key="s"
        )
        made: list[S3Destination] = []
        first = _ms(lambda: made.append(S3Destination(config, LOCAL)), 1)[0]
        later = _ms(lambda: made.append(S3Destination(config, LOCAL)), args.constructions)
        for dest in made[1:]:
            dest.close()
        print(
            f"construction: first {first:.1f} ms, later median {statistics.median(later):.1f} ms (max {max(later):.1f})"
        )

        plain = boto3.session.Session(
            aws_access_key_id="AKIABENCH", aws_secret_access_key="s", region_name="us-east-1"
        ).client("s3", endpoint_url=server.endpoint, config=Config(s3={"addressing_style": "path"}, proxies={}))
        plain_clients: list[Any] = []
        plain_made = _ms(
            lambda: plain_clients.append(
                boto3.session.Session(aws_access_key_id="A", aws_secret_access_key="s", region_name="us-east-1").client(
                    "s3", endpoint_url=server.endpoint
                )
            ),
            5,
        )
        for client in plain_clients:
            client.close()
        print(f"construction: plain boto3 session+client median {statistics.median(plain_made):.1f} ms")
        dest = made[0]
        for label, body in (("1 KiB", os.urandom(1024)), ("1 MiB", os.urandom(1 << 20))):
            md5 = base64.b64encode(hashlib.md5(body).digest()).decode()

            def ours(body: bytes = body) -> None:
                dest.put("p/a.gz", body)

            def theirs(body: bytes = body, md5: str = md5) -> None:
                cast(Any, plain).put_object(Bucket=BUCKET, Key="p/b.gz", Body=body, ContentMD5=md5)

            ours()  # warm up
            theirs()
            a: list[float] = []
            b: list[float] = []
            # Interleaved, so load on the machine hits both alike.
            for _ in range(args.puts):
                a += _ms(ours, 1)
                b += _ms(theirs, 1)
            print(
                f"PUT {label}: S3Destination median {statistics.median(a):.1f} ms, "
                f"plain boto3 median {statistics.median(b):.1f} ms"
            )
        dest.close()
        plain.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
