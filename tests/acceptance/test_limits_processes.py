"""Fleet-wide limits with real worker processes: a rate limit holds across four processes
(Redis and database windows), a concurrency limit is never exceeded, and a circuit breaker
opens on a failing dependency, holds jobs back without spending their attempts, and closes."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.core import limits as lim
from ledgerq.store.engine import create_engine
from ledgerq.store.limits import SqlLimitStore
from ledgerq.store.tables import jobs
from tests.acceptance import limits_app
from tests.acceptance.conftest import REPO_ROOT, Proc, cli_env
from tests.helpers import wait_until
from tests.redis_server import RedisServer

APP_REF = "tests.acceptance.limits_app:app"


class Fleet:
    """Worker processes of ``limits_app`` on one database, and a view of that database."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.url = url
        self.engine = create_engine(url, pool_size=4)
        limits_app.metadata.create_all(self.engine)
        self.app = limits_app.make_app(database_url=url)
        self.store = SqlLimitStore(self.engine)
        self._dir = tmp_path
        self.procs: list[Proc] = []

    def start(self, count: int, queue: str, env: dict[str, str] | None = None) -> None:
        """Start ``count`` worker processes of ``queue``."""
        for _ in range(count):
            path = self._dir / f"worker-{len(self.procs)}.stderr"
            args = ["--concurrency", "4", "--poll-interval", "0.1", "--queues", queue]
            with path.open("wb") as log:
                popen = subprocess.Popen(
                    [sys.executable, "-m", "ledgerq.cli.main", "--app", APP_REF, "worker"]
                    + ["start", *args],
                    cwd=REPO_ROOT,
                    env=cli_env(self.url, env),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            self.procs.append(Proc(popen, path))

    def stop(self) -> None:
        """SIGTERM every worker and wait for it."""
        for proc in self.procs:
            if proc.running():
                proc.signal(signal.SIGTERM)
        for proc in self.procs:
            proc.wait(30)

    def rows(self, stmt: sa.Select[Any]) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(stmt))

    def states(self, task: str) -> dict[str, int]:
        stmt = sa.select(jobs.c.state, sa.func.count()).where(jobs.c.task == task)
        return dict(self.rows(stmt.group_by(jobs.c.state)))

    def close(self) -> None:
        for proc in self.procs:
            if proc.running():
                proc.popen.kill()
            proc.popen.wait()
        self.app.close()
        self.engine.dispose()


@pytest.fixture
def fleet(
    make_database_url: Callable[[str], str], tmp_path: Path
) -> Iterator[Callable[[str], Fleet]]:
    made: list[Fleet] = []

    def make(backend: str) -> Fleet:
        made.append(Fleet(make_database_url(backend), tmp_path))
        return made[-1]

    yield make
    for one in made:
        one.close()


def most_in_window(times: list[float], window: float) -> int:
    best, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


@pytest.mark.parametrize(
    ("backend", "windows"),
    [("postgresql", "redis"), ("postgresql", "database"), ("sqlite", "database")],
)
def test_rate_limit_of_50_per_second_holds_over_four_processes(
    backend: str, windows: str, fleet: Callable[[str], Fleet], request: pytest.FixtureRequest
) -> None:
    db = fleet(backend)
    env = None
    if windows == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        env = {"LEDGERQ_REDIS_URL": server.url}
    rated = db.app.registry.get(limits_app.RATED)
    assert rated.limits is not None and rated.limits.rate == lim.Rate(50, 1.0, burst=5)
    db.app.client.enqueue(
        [db.app.client.build(rated, (n,), None, max_attempts=2) for n in range(650)]
    )
    db.start(4, "rated", env)
    try:
        wait_until(
            lambda: db.states(limits_app.RATED).get("succeeded", 0) >= 650,
            timeout=60,
            what="650 rated jobs done",
            interval=0.5,
        )
    except AssertionError:
        raise AssertionError(
            f"{db.states(limits_app.RATED)}\n{db.procs[0].log()[-3000:]}"
        ) from None
    db.stop()
    epoch = sa.func.extract("epoch", jobs.c.started_at) if backend == "postgresql" else None
    started = sorted(
        (r[0].timestamp() if epoch is None else float(r[0]))
        for r in db.rows(sa.select(epoch if epoch is not None else jobs.c.started_at))
    )
    first = started[0]
    print([l[:300] for p in db.procs for l in p.log().splitlines() if "warn" in l.lower()][:10])
    import collections

    print(sorted(collections.Counter(int(t - first) for t in started).items()))
    in_ten_seconds = sum(1 for t in started if first <= t < first + 10.0)
    assert 450 <= in_ten_seconds <= 550, in_ten_seconds
    # The claim stamps started_at; the handler starts once the limit admitted the job.
    began = sorted(r[0] for r in db.rows(sa.select(limits_app.runs.c.began)))
    # Over 5 s: the 10% of the limit plus the blur of a loaded machine's thread switches.
    assert most_in_window(began, 5.0) <= 275
    from ledgerq.store.tables import job_assignments as ja

    print(
        "postponed",
        db.rows(sa.select(sa.func.count()).where(ja.c.outcome == "requeued")),
        "span",
        started[-1] - first,
    )
    # Waiting spent no attempt: each job ran once and keeps its whole budget.
    budgets = db.rows(sa.select(jobs.c.max_attempts - jobs.c.attempt).distinct())
    assert budgets == [(1,)]
