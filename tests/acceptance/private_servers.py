"""Private database servers for tests that restart or kill their database: each test gets its
own PostgreSQL cluster (``initdb``) or MariaDB data directory on a free port in a temporary
directory, so the shared services other tests use are never touched."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_BIN = sorted(glob.glob("/usr/lib/postgresql/*/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivatePostgres:
    """A throwaway PostgreSQL cluster; ``restart_immediately`` crashes and restarts it."""

    def __init__(self, standby_of: PrivatePostgres | None = None) -> None:
        if not PG_BIN:
            pytest.skip("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin)")
        self.bin = Path(PG_BIN[-1])
        self._as_postgres = ["runuser", "-u", "postgres", "--"] if os.getuid() == 0 else []
        self.port = free_port()
        self._owns_root = standby_of is None
        if standby_of is not None:
            self.root = standby_of.root
            self.data = self.root / f"standby-{self.port}"
            self._run(
                "pg_basebackup",
                *("-D", str(self.data), "-R", "-X", "stream", "--no-sync"),
                *("-h", "127.0.0.1", "-p", str(standby_of.port), "-U", "postgres"),
            )
            self.start()
            return
        # Not under pytest's tmp path: the server runs as ``postgres``, which cannot enter
        # root's private directories.
        self.root = Path(tempfile.mkdtemp(prefix="ledgerq-pg-"))
        self.data = self.root / "pgdata"
        if self._as_postgres:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run(
            [*self._as_postgres, str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.data / "server.log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop_immediately(self) -> None:
        """Stop without a checkpoint, as a crash would."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def configure(self, line: str) -> None:
        """Append ``line`` to the cluster's postgresql.conf and reload it."""
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(f"\n{line}\n")
        self._run("pg_ctl", "-D", str(self.data), "reload")

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run ``statement`` with psql; return its unaligned output."""
        done = subprocess.run(
            [
                *self._as_postgres,
                str(self.bin / "psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-d",
                database,
                "-Atc",
                statement,
            ],
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.stdout.strip()

    def standby(self) -> PrivatePostgres:
        """A streaming standby of this cluster (``pg_basebackup -R -X stream``), started on a
        port of its own in the same folder. The base backup copies postgresql.conf, so the
        standby keeps this cluster's settings, as an operator's does."""
        return PrivatePostgres(standby_of=self)

    def promote(self) -> None:
        """Promote a standby to primary and wait until it accepts writes."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop_immediately()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)


class PrivateMariadb:
    """A throwaway MariaDB server; ``kill`` SIGKILLs it, ``start`` brings it back."""

    def __init__(self, *options: str) -> None:
        """``options``: more ``mariadbd`` command-line options (``--performance-schema=ON``)."""
        self._options = options
        if shutil.which("mariadbd") is None or shutil.which("mariadb-install-db") is None:
            pytest.skip("no MariaDB server binaries (mariadbd, mariadb-install-db)")
        self.root = Path(tempfile.mkdtemp(prefix="ledgerq-my-"))
        self.port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.root / 'data'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *(["--user=root"] if os.getuid() == 0 else []),
            ],
            check=True,
            capture_output=True,
            timeout=120,
            cwd=self.root,
        )
        self.start()

    @property
    def url(self) -> str:
        return f"mariadb://root@127.0.0.1:{self.port}/ledger"

    def start(self) -> None:
        """Start the server and wait until it answers; create the ``ledger`` database."""
        with (self.root / "server.log").open("ab") as log:
            self._proc = subprocess.Popen(
                [
                    "mariadbd",
                    "--no-defaults",
                    f"--datadir={self.root / 'data'}",
                    f"--port={self.port}",
                    "--bind-address=127.0.0.1",
                    f"--socket={self.root / 'sock'}",
                    "--skip-log-bin",
                    *(["--user=root"] if os.getuid() == 0 else []),
                    *self._options,
                ],
                stdout=log,
                stderr=log,
            )
        deadline = time.monotonic() + 60
        while True:
            done = subprocess.run(
                [
                    "mariadb",
                    "-h127.0.0.1",
                    f"-P{self.port}",
                    "-uroot",
                    "-e",
                    "CREATE DATABASE IF NOT EXISTS ledger",
                ],
                capture_output=True,
                check=False,
            )
            if done.returncode == 0:
                return
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise RuntimeError(f"private MariaDB did not start: {done.stderr!r}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(30)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def streaming_pair(*, sync: bool = False) -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    """A private primary and its standby streaming (synchronously with ``sync``), with an empty
    ``ledger`` database on the primary; both are stopped afterwards."""
    from tests.helpers import wait_until

    primary = PrivatePostgres()
    standby = None
    try:
        if sync:
            primary.configure("synchronous_standby_names = '*'")
        standby = primary.standby()
        wanted = "streaming sync" if sync else "streaming async"
        wait_until(
            lambda: (
                primary.sql("SELECT state || ' ' || sync_state FROM pg_stat_replication") == wanted
            ),
            timeout=30,
            what=f"the standby {wanted}",
        )
        primary.sql("CREATE DATABASE ledger")
        yield primary, standby
    finally:
        if standby is not None:
            standby.close()
        primary.close()
