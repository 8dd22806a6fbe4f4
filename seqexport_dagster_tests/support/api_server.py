"""`seqexport serve` for tests: a real uvicorn server on 127.0.0.1 in its own process group, or one
in a thread of the test process (sharing the test's clock) for the remote-CLI scenarios."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn

from seqexport_dagster.management.api import Exports
from seqexport_dagster.service.app import create_app
from seqexport_dagster.service.guard import RateLimit
from seqexport_dagster.store.token import TokenStore
from seqexport_dagster_tests.support.moto_server import free_port
from seqexport_dagster_tests.support.processes import ROOT, group_process


@dataclass
class ApiServer:
    url: str
    log: Path | None = None
    pid: int | None = None  # the server process (serve_process only): for its memory figures

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60, trust_env=False)

    def log_text(self) -> str:
        return self.log.read_text() if self.log else ""

    def log_with(self, text: str, timeout: float = 30.0) -> str:
        """The log once it holds ``text``: a request's access line is written after its answer is
        sent, so a client that has its answer may read the log before the line is there."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert text in log, f"{text!r} did not reach the server's log within {timeout:g} s"
        return log


def wait_ready(
    url: str, process: subprocess.Popen[bytes] | None = None, timeout: float = 60.0, *, ready: bool = True
) -> None:
    """Until /readyz answers 200 (``ready=False``: until the server answers at all)."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"seqexport serve exited with {process.returncode}")
        try:
            status = httpx.get(f"{url}/readyz", timeout=2, trust_env=False).status_code
            if status == 200 or not ready:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"seqexport serve did not answer at {url} within {timeout}s")
        time.sleep(0.1)


@contextmanager
def serve_process(
    env: dict[str, str], log: Path, *extra: str, planted_dns: dict[str, str] | None = None
) -> Iterator[ApiServer]:
    """`seqexport serve` as a subprocess (own process group), stopped by PID. With ``planted_dns``
    (name: address) its resolver answers those names so (`support.planted_dns`)."""
    port = free_port()
    command = [str(Path(sys.executable).parent / "seqexport"), "serve", "--port", str(port), *extra]
    if planted_dns:
        answers = ",".join(f"{name}={address}" for name, address in planted_dns.items())
        command = [sys.executable, "-m", "seqexport_dagster_tests.support.planted_dns", answers, *command[1:]]
    with group_process(command, env=env, log=log) as process:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process)
        yield ApiServer(url, log, process.pid)


@contextmanager
def serve_thread(exports: Exports, write_limit: RateLimit | None = None) -> Iterator[ApiServer]:
    """The same app on uvicorn in a thread: it shares ``exports`` (and so the test's clock)."""
    port = free_port()
    config = uvicorn.Config(
        create_app(exports, write_limit=write_limit), host="127.0.0.1", port=port, access_log=False, log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_ready(f"http://127.0.0.1:{port}", ready=False)
        yield ApiServer(f"http://127.0.0.1:{port}")
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def mint(exports: Exports, account_id: str | None) -> str:
    value, _ = TokenStore(exports.store.engine).create(account_id=account_id, now_ms=exports.clock())
    return value


def server_env(control_url: str, key_spec: str, home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEQEXPORT_", "DAGSTER_"))}
    env.update(
        SEQEXPORT_DATABASE_URL=control_url,
        SEQEXPORT_SECRET_KEYS=key_spec,
        SEQEXPORT_HOME=str(home),
        SEQEXPORT_ALLOW_LOCAL="1",  # moto listens on loopback
        PYTHONPATH=str(ROOT),
    )
    return env
