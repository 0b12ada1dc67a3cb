"""Fixtures of the hostile-world suite: a real ``ledgerq serve`` process to attack over raw
sockets, and helpers to read its memory and speak just enough HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.admin.conftest import ADMIN_TOKEN
from tests.admin.test_serve_process import call, free_port
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "ledgerq.cli.main"]


@dataclass
class ServeProcess:
    """A running ``ledgerq serve``: its process, port and stderr file."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    stopped: bool = field(default=False)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def connect(self, timeout: float = 10.0) -> socket.socket:
        """A raw TCP connection to the server."""
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return sock

    def memory_kib(self, field_name: str = "VmHWM") -> int:
        """A memory figure of the server from /proc (VmHWM: the peak resident set)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field_name} in /proc/{self.proc.pid}/status")

    def stop(self) -> str:
        """SIGTERM the server, wait for it, and return its stderr."""
        if not self.stopped:
            self.stopped = True
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.log.read_text()


StartServe = Callable[..., ServeProcess]


@pytest.fixture
def start_serve(tmp_path: Path) -> Iterator[StartServe]:
    """Factory: start ``ledgerq --app APP serve`` on a free port with ``env`` added to the
    environment (an admin token is set); every server is stopped at the end of the test."""
    started: list[ServeProcess] = []

    def start(
        database_url: str, app: str = "tests.admin.tasks_app:app", **env: str
    ) -> ServeProcess:
        port = free_port()
        variables = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")},
            "LEDGERQ_DATABASE_URL": database_url,
            "LEDGERQ_API_TOKEN": ADMIN_TOKEN,
            **env,
        }
        log = tmp_path / f"serve-{port}.log"
        with log.open("w") as stderr:
            proc = subprocess.Popen(
                [*CLI, "--app", app, "serve", "--port", str(port)],
                cwd=ROOT,
                env=variables,
                stderr=stderr,
            )
        served = ServeProcess(proc, port, log)
        started.append(served)
        wait_until(
            lambda: call(f"{served.base}/health/live") == 200 or proc.poll() is not None,
            what="serve answers",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        return served

    yield start
    for served in started:
        served.stop()


def read_response(sock: socket.socket, timeout: float = 10.0) -> tuple[int, bytes]:
    """The status code and the head of the next response on ``sock`` (0 if none came)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionError):
            break
        if not chunk:
            break
        data += chunk
    if not data.startswith(b"HTTP/1.1 "):
        return 0, data
    return int(data.split(b" ", 2)[1]), data


def closed_within(sock: socket.socket, timeout: float) -> float | None:
    """Seconds until the server closed ``sock`` (reading and dropping anything it sends), or
    None if it was still open after ``timeout`` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        sock.settimeout(max(0.05, timeout - (time.monotonic() - start)))
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
        except TimeoutError:
            return None
        except ConnectionError:
            return time.monotonic() - start
    return None
