"""Fixtures of the acceptance suite: real ``ledgerq`` subprocesses against real databases.

``ledger(backend)`` gives a migrated database with the effect tables and a view of it;
``procs`` starts CLI subprocesses (workers or one-shot commands) with their stderr in files
under ``tmp_path`` and kills whatever is still running when the test ends, before the
database is dropped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.store.engine import create_engine
from ledgerq.store.tables import jobs
from tests.acceptance import effects_app
from tests.conftest import direct_url_of, pooler_env

REPO_ROOT = Path(__file__).resolve().parents[2]
APP_REF = "tests.acceptance.effects_app:app"
CLI = (sys.executable, "-m", "ledgerq.cli.main")


class Ledger:
    """The test's view of one database: the ledger's jobs and the effect tables."""

    def __init__(self, url: str) -> None:
        self.url = url
        # Through PgBouncer (backend ``pgbouncer``) the test reads over the direct URL, and
        # the application enqueues through the pooler as workers run (``env``).
        direct = direct_url_of(url)
        self.env = pooler_env(url)
        self.engine = create_engine(direct or url, pool_size=2)
        effects_app.metadata.create_all(self.engine)
        pooled = {k[len("LEDGERQ_") :].lower(): v for k, v in self.env.items()}
        self.effects = effects_app.make_app(database_url=url, **pooled)

    def _rows(self, stmt: sa.Select[Any]) -> list[sa.Row[Any]]:
        with self.engine.connect() as conn:
            return list(conn.execute(stmt))

    def jobs(self) -> dict[int, sa.Row[Any]]:
        """Every job by id: state, attempt, postponed, worker_id, finished_at, error."""
        cols = (
            jobs.c.id,
            jobs.c.state,
            jobs.c.attempt,
            jobs.c.postponed,
            jobs.c.worker_id,
            jobs.c.finished_at,
            jobs.c.error,
        )
        return {row.id: row for row in self._rows(sa.select(*cols))}

    def states(self) -> Counter[str]:
        """How many jobs are in each state."""
        stmt = sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)
        return Counter({state: count for state, count in self._rows(stmt)})

    def job_count(self) -> int:
        """How many jobs exist."""
        return sum(self.states().values())

    def ids_in(self, state: str) -> set[int]:
        """Ids of the jobs in ``state``."""
        return {row.id for row in self._rows(sa.select(jobs.c.id).where(jobs.c.state == state))}

    def effect_rows(self) -> dict[str, sa.Row[Any]]:
        """Recorded effects by key (job_id, attempt)."""
        return {row.key: row for row in self._rows(sa.select(effects_app.effects))}

    def effect_count(self) -> int:
        """Rows in ``effects``."""
        return int(self._rows(sa.select(sa.func.count()).select_from(effects_app.effects))[0][0])

    def duplicate_rows(self) -> list[tuple[str, int, int]]:
        """Effects written a second time: (key, job_id, attempt)."""
        t = effects_app.duplicates
        return [tuple(r) for r in self._rows(sa.select(t.c.key, t.c.job_id, t.c.attempt))]  # type: ignore[misc]

    def start_rows(self) -> list[tuple[str, int, int]]:
        """Every recorded start of ``effects.slow``: (key, job_id, attempt)."""
        t = effects_app.starts
        stmt = sa.select(t.c.key, t.c.job_id, t.c.attempt).order_by(t.c.id)
        return [tuple(r) for r in self._rows(stmt)]  # type: ignore[misc]

    def failures(self) -> dict[int, str]:
        """Jobs that did not succeed, with their state and error, for assertion messages."""
        return {
            i: f"{r.state}: {r.error}" for i, r in self.jobs().items() if r.state != "succeeded"
        }

    def close(self) -> None:
        self.effects.app.close()
        self.engine.dispose()


@pytest.fixture
def ledger(make_database_url: Callable[[str], str]) -> Iterator[Callable[[str], Ledger]]:
    """Factory: a migrated ledger of the named backend, with empty effect tables."""
    made: list[Ledger] = []

    def make(backend_name: str) -> Ledger:
        made.append(Ledger(make_database_url(backend_name)))
        return made[-1]

    yield make
    for view in made:
        view.close()


def cli_env(url: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without any LEDGERQ_* setting, plus the database URL and ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}
    if url is not None:
        env["LEDGERQ_DATABASE_URL"] = url
    env.update(extra or {})
    return env


class Proc:
    """One CLI subprocess whose stderr goes to a file."""

    def __init__(self, popen: subprocess.Popen[bytes], log_path: Path) -> None:
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log(self) -> str:
        """Everything the process wrote to stderr so far."""
        return self.log_path.read_text(errors="replace")

    def signal(self, signum: signal.Signals) -> None:
        """Send ``signum``; the process must still be running."""
        assert self.popen.poll() is None, (
            f"process exited early ({self.popen.returncode}):\n{self.log()}"
        )
        self.popen.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """The exit code; fail (showing stderr) if the process runs past ``timeout`` seconds."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"pid {self.pid} still running after {timeout} s:\n{self.log()[-4000:]}"
            ) from None

    def running(self) -> bool:
        return self.popen.poll() is None


class Procs:
    """Starts ``ledgerq`` subprocesses in the repository root; kills leftovers at the end."""

    def __init__(self, tmp_path: Path) -> None:
        self._dir = tmp_path
        self._procs: list[Proc] = []

    def worker(
        self,
        url: str,
        *args: str,
        env: dict[str, str] | None = None,
        app: str = APP_REF,
        prefix: Sequence[str] = (),
    ) -> Proc:
        """Start ``ledgerq --app APP worker start ARGS`` on ``url`` (effects_app by default)."""
        return self.start(url, "worker", "start", *args, env=env, app=app, prefix=prefix)

    def start(
        self,
        url: str | None,
        *args: str,
        env: dict[str, str] | None = None,
        app: str = APP_REF,
        prefix: Sequence[str] = (),
    ) -> Proc:
        """Start ``ledgerq --app APP ARGS`` in the background (effects_app by default).
        ``prefix`` goes before the command, e.g. ``ip netns exec NAME``: it must ``exec`` the
        command, so that signals sent to the process reach ``ledgerq`` itself."""
        log_path = self._dir / f"proc-{len(self._procs)}-{args[0]}.stderr"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                [*prefix, *CLI, "--app", app, *args],
                cwd=REPO_ROOT,
                env=cli_env(url, env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,  # its own process group: kill_all ends its children
            )
        proc = Proc(popen, log_path)
        self._procs.append(proc)
        return proc

    def run(
        self,
        url: str | None,
        *args: str,
        env: dict[str, str] | None = None,
        app: str | None = APP_REF,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``ledgerq [--app APP] ARGS`` to completion and capture its output."""
        app_args = ("--app", app) if app else ()
        return subprocess.run(
            [*CLI, *app_args, *args],
            cwd=REPO_ROOT,
            env=cli_env(url, env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def kill_all(self) -> None:
        """SIGKILL every process started here and its process group (a manager's children)."""
        for proc in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            proc.popen.wait()


@pytest.fixture
def procs(tmp_path: Path, ledger: Callable[[str], Ledger]) -> Iterator[Procs]:
    """Subprocess starter. Depends on ``ledger`` so that every process is dead before the
    test's databases are dropped."""
    started = Procs(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()
