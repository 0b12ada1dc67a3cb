"""A private PgBouncer in transaction pooling mode on a free loopback port, in front of one
ledger (a schema of the shared PostgreSQL server), stopped at the end of its test."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import psycopg
import sqlalchemy as sa

from tests.redis_server import free_port

#: Server sessions PgBouncer opens to PostgreSQL for the ledger: fewer than a test's client
#: connections, so transactions of different clients really share server sessions.
POOL_SIZE = 4


class PgBouncer:
    """One ``pgbouncer`` process whose database ``ledger`` is the schema ``schema`` of the
    PostgreSQL server of ``backend_url`` (its search_path is set on every server session).
    ``url`` is what clients connect to; ``backend_url`` bypasses the pooler."""

    def __init__(
        self, directory: Path, backend_url: str, schema: str, binary: str, time_zone: str = ""
    ) -> None:
        backend = sa.make_url(backend_url)
        self.port = free_port()
        self._user = backend.username
        self.url = f"postgresql://{backend.username}@127.0.0.1:{self.port}/ledger"
        directory.mkdir(parents=True, exist_ok=True)
        users = directory / "users.txt"
        users.write_text(f'"{backend.username}" ""\n')
        # ``time_zone``: every server session starts in it (a server whose default is not UTC).
        zone = f"; SET TIME ZONE ''{time_zone}''" if time_zone else ""
        server = (
            f"host={backend.host} port={backend.port or 5432} dbname={backend.database}"
            f" user={backend.username} connect_query='SET search_path TO {schema}{zone}'"
        )
        config = directory / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"ledger = {server}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\n"
            f"pool_mode = transaction\ndefault_pool_size = {POOL_SIZE}\n"
            "max_client_conn = 500\nserver_lifetime = 3600\n"
            f"admin_users = {backend.username}\n"
        )
        # PgBouncer refuses to run as root; it reads its files before dropping to nobody.
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        self._log = (directory / "pgbouncer.log").open("wb")
        self._proc = subprocess.Popen(
            [binary, *user, str(config)], stdout=self._log, stderr=self._log
        )
        self._wait_listening()

    def transactions(self) -> int:
        """Transactions PgBouncer has passed to the ledger's database so far (``SHOW STATS``
        on its admin console, which speaks only the simple query protocol)."""
        console = f"postgresql://{self._user}@127.0.0.1:{self.port}/pgbouncer"
        with psycopg.connect(console, autocommit=True, cursor_factory=psycopg.ClientCursor) as conn:
            rows = conn.execute("SHOW STATS").fetchall()
            names = [column.name for column in conn.execute("SHOW STATS").description or ()]
        by_db = {row[0]: dict(zip(names, row, strict=True)) for row in rows}
        return int(by_db["ledger"]["total_xact_count"])

    @staticmethod
    def binary() -> str | None:
        """Path of the ``pgbouncer`` program (Debian puts it in /usr/sbin), or None."""
        return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"pgbouncer on port {self.port} did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        """Stop PgBouncer (SIGINT: at once, closing every connection) and wait for it."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        self._log.close()
