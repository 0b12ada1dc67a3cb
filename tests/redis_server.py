"""A private ``redis-server`` on a free loopback port, which a test may flush, kill and restart
without touching the shared server or other tests."""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive free TCP ports, below the ephemeral range.

    A run taken from the ephemeral range can lose its later ports to any outgoing
    connection the parallel tests open, so the run is drawn from 20000-32000.
    """
    for _ in range(200):
        first = random.randrange(20000, 32000 - count)
        if all(_bindable(first + offset) for offset in range(count)):
            return first
    raise RuntimeError(f"no run of {count} free ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class RedisServer:
    """One redis-server process; ``url`` stays valid across ``restart``."""

    def __init__(self, directory: Path, *extra: str, password: str | None = None) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed")
        self._binary = binary
        self._dir = directory
        self._extra = (*extra, "--requirepass", password) if password else extra
        self._password = password
        self.port = free_port()
        auth = f":{password}@" if password else ""
        self.url = f"redis://{auth}127.0.0.1:{self.port}/0"
        self._proc: subprocess.Popen[bytes] | None = None
        self.start()

    def client(self) -> redis.Redis:
        """A client of this server (the caller closes it)."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self._password, socket_timeout=5
        )

    def start(self) -> None:
        """Start the server on its port and wait until it answers."""
        args = [self._binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self._dir), *self._extra]
        self._proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as conn:
                    conn.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the server (its data is gone) and wait for it to die."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open, nothing is answered until ``resume``."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server."""
        assert self._proc is not None
        self._proc.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Kill and start again on the same port (empty)."""
        self.kill()
        self.start()

    def flushall(self) -> None:
        """Drop every key."""
        with self.client() as conn:
            conn.flushall()

    def stop(self) -> None:
        """Kill the server for good."""
        self.kill()
