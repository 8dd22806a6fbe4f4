"""A real moto server in a subprocess on 127.0.0.1, for tests and demos.

A subprocess rather than moto's ThreadedMotoServer: moto keeps its auth switch
(``INITIAL_NO_AUTH_ACTION_COUNT``) in process-global settings, so an IAM-enforcing server must not
share a process with the tests (or with another server that should stay permissive).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, cast

import boto3
from botocore.config import Config

from seqexport_dagster_tests.support.processes import start_group, stop_group

ADMIN_KEY = "testing"
ADMIN_SECRET = "testing"  # moto accepts anything while auth is off


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class MotoServer:
    port: int
    process: subprocess.Popen[bytes]
    iam: bool
    enforcing: bool = False
    _clients: list[Any] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admin_client(self, service: str = "s3") -> Any:
        """A plain boto3 client with admin rights (only meaningful while auth is off)."""
        client = _client(service, (ADMIN_KEY, ADMIN_SECRET), self.endpoint)
        self._clients.append(client)
        return client

    def enforce_auth(self) -> None:
        """From now on every request is authenticated and authorized against moto's IAM."""
        if not self.iam:
            raise RuntimeError("start(iam=True) for a server that enforces IAM; this one is shared")
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )
        with _no_proxy_opener().open(request, timeout=10) as response:
            if response.status != 200:
                raise RuntimeError(f"moto reset-auth answered {response.status}")
        self.enforcing = True

    def reset(self) -> None:
        """Forget every bucket and user (auth stays as it is)."""
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset", data=b"", method="POST")
        with _no_proxy_opener().open(request, timeout=10):
            pass

    def client_as(self, key: tuple[str, str]) -> Any:
        """An S3 client signing with ``key`` (an IAM user's), one attempt per call."""
        client = _client("s3", key, self.endpoint)
        self._clients.append(client)
        return client

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        # The server runs in its own session: signal the group so a reloader child dies too.
        stop_group(self.process, grace_s=5)


_SESSION_LOCK = threading.Lock()


@functools.cache
def _session() -> boto3.session.Session:
    return boto3.session.Session()


def _client(service: str, key: tuple[str, str], endpoint: str) -> Any:
    """A client of the process's one boto3 session, signing with ``key``, one attempt per call. A
    session of its own per client parsed botocore's endpoint and service models again (~0.1 CPU-s a
    client, one or more a test); clients of one session share them. A session is not
    thread-safe (its clients are), so creating one holds a lock."""
    with _SESSION_LOCK:
        return _session().client(
            cast(Any, service),
            aws_access_key_id=key[0],
            aws_secret_access_key=key[1],
            region_name="us-east-1",
            endpoint_url=endpoint,
            config=Config(s3={"addressing_style": "path"}, proxies={}, retries={"total_max_attempts": 1}),
        )


def _no_proxy_opener() -> urllib.request.OpenerDirector:
    # Tests set HTTP(S)_PROXY to dead addresses on purpose; talk to loopback directly.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def start(iam: bool = False, timeout: float = 30.0) -> MotoServer:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("AWS_", "HTTP_PROXY", "HTTPS_PROXY"))}
    env["AWS_DEFAULT_REGION"] = "us-east-1"
    process = start_group(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        cwd=None,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = MotoServer(port=port, process=process, iam=iam)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"moto server exited with {process.returncode}")
        try:
            with _no_proxy_opener().open(f"{server.endpoint}/moto-api/", timeout=2):
                return server
        except OSError:
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto server did not answer on port {port} within {timeout}s") from None
            time.sleep(0.1)


def policy(actions: str, resource: str) -> str:
    """An IAM policy document allowing ``actions`` on ``resource``."""
    return json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": resource}]}
    )


def make_user(iam: Any, name: str, document: str) -> tuple[str, str]:
    """An IAM user with an inline policy, and its access key (id, secret)."""
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=document)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def put_only_user(iam: Any, name: str, bucket: str, prefix: str) -> tuple[str, str]:
    """The customer docs' least-privilege key: ``s3:PutObject`` on ``<bucket>/<prefix>/*``, nothing else."""
    return make_user(iam, name, policy("s3:PutObject", f"arn:aws:s3:::{bucket}/{prefix}/*"))
