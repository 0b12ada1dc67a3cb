"""A private Redis Sentinel deployment for tests: a master, one replica and three sentinels
(quorum 2, a master is down after 1 s), each on a free loopback port with its own config file
and folder, so a test may SIGKILL the master and watch the sentinels promote the replica
without touching the shared server. ``redis-sentinel`` is Debian's package of that name."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.helpers import wait_until
from tests.redis_server import RedisServer, free_port

SERVICE = "mymaster"
#: Sentinel settings: how long a silent master is "subjectively down", how long one failover
#: attempt may take before another sentinel tries (and twice that before the same one does).
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


class SentinelProcess:
    """One ``redis-sentinel`` with its config file (which it rewrites) in ``directory``."""

    def __init__(
        self, binary: str, directory: Path, master_port: int, *, password: str | None
    ) -> None:
        directory.mkdir()
        self.port = free_port()
        self._password = password
        lines = [
            f"port {self.port}",
            "bind 127.0.0.1",
            f"dir {directory}",
            f"logfile {directory / 'sentinel.log'}",
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2",
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}",
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}",
            f"sentinel parallel-syncs {SERVICE} 1",
        ]
        if password:
            # The same password guards the data nodes and the sentinels (it need not).
            lines += [f"sentinel auth-pass {SERVICE} {password}", f"requirepass {password}"]
        self.config = directory / "sentinel.conf"
        self.config.write_text("\n".join(lines) + "\n")
        self.log_path = directory / "sentinel.log"
        self._proc = subprocess.Popen(
            [binary, str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )

    def client(self) -> redis.Redis:
        """A client of this sentinel (the caller closes it)."""
        return redis.Redis(
            host="127.0.0.1", port=self.port, password=self._password, socket_timeout=5
        )

    def ask(self, call: Callable[[redis.Redis], Any]) -> Any:
        """``call(client)``, or None if the sentinel does not answer."""
        try:
            with self.client() as conn:
                return call(conn)
        except (redis.ConnectionError, redis.TimeoutError):
            return None

    def stop(self) -> None:
        """SIGKILL the sentinel and wait for it."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait(10)


class SentinelSet:
    """A master, a replica and three sentinels watching them as ``SERVICE``; the servers are
    up, the replica in sync and the sentinels answering on return; ``wait_ready`` waits until
    they could fail over."""

    def __init__(self, directory: Path, *, password: str | None = None) -> None:
        binary = shutil.which("redis-sentinel")
        if binary is None:
            message = "redis-sentinel is not installed (Debian package redis-sentinel)"
            if os.environ.get("CI"):  # .ci/run installs it
                pytest.fail(message)
            pytest.skip(message)
        self.password = password
        self.sentinels: list[SentinelProcess] = []
        (directory / "master").mkdir()
        (directory / "replica").mkdir()
        # Diskless full syncs start at once (the default waits 5 s for more replicas).
        self.master = RedisServer(
            directory / "master", "--repl-diskless-sync-delay", "0", password=password
        )
        auth = ("--masterauth", password) if password else ()
        self.replica: RedisServer | None = None
        try:
            self.replica = RedisServer(
                directory / "replica",
                *("--replicaof", "127.0.0.1", str(self.master.port), *auth),
                password=password,
            )
            wait_until(self._replica_in_sync, 20, "the replica to sync with the master")
            for number in range(3):
                self.sentinels.append(
                    SentinelProcess(
                        binary, directory / f"sentinel{number}", self.master.port, password=password
                    )
                )
            for sentinel in self.sentinels:
                wait_until(lambda s=sentinel: s.ask(lambda c: c.ping()), 10, "a sentinel up")
        except BaseException:
            self.stop()
            raise

    def wait_ready(self) -> None:
        """Wait until every sentinel knows the replica and the two other sentinels (they find
        each other through hello messages every 2 s), so that a failover can start. The master
        is found through them at once, before that."""
        wait_until(
            self._sentinels_ready, 30, "three sentinels that know each other and the replica"
        )

    def url(self, db: int = 0) -> str:
        """The ``redis+sentinel://`` URL of the service (with the passwords, if any)."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        auth = f":{self.password}@" if self.password else ""
        query = f"?sentinel_password={self.password}" if self.password else ""
        return f"redis+sentinel://{auth}{hosts}/{SERVICE}/{db}{query}"

    def _replica_in_sync(self) -> bool:
        assert self.replica is not None
        with self.replica.client() as conn:
            info: Any = conn.info("replication")
        return bool(info.get("master_link_status") == "up")

    def _sentinels_ready(self) -> bool:
        for sentinel in self.sentinels:
            state = sentinel.ask(lambda conn: conn.sentinel_master(SERVICE))
            if not state or state.get("num-slaves") != 1 or state.get("num-other-sentinels") != 2:
                return False
            if not state.get("is_master") or state.get("is_sdown") or state.get("is_odown"):
                return False
        return True

    def master_port(self) -> set[int | None]:
        """The master's port as each answering sentinel names it."""
        ports: set[int | None] = set()
        for sentinel in self.sentinels:
            address = sentinel.ask(lambda conn: conn.sentinel_get_master_addr_by_name(SERVICE))
            if address is not None:
                ports.add(int(address[1]))
        return ports

    def stop(self) -> None:
        """Kill every process of the set."""
        for sentinel in self.sentinels:
            sentinel.stop()
        if self.replica is not None:
            self.replica.stop()
        self.master.stop()
