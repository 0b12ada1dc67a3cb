"""The application of the limit acceptance tests (tests/acceptance/test_limits_processes.py).

Each handler writes a row to ``runs`` (job, attempt, start and end times, success), through an
engine of its own, so a test can see what really ran, how often and how many at once. The flag
file named by ``LIMITS_FLAG`` stands for a dependency: while it exists, ``fragile`` fails.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ
from ledgerq.core.limits import Breaker
from ledgerq.store.engine import normalize_url

metadata = sa.MetaData()

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("task", sa.String(50), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("began", sa.Double, nullable=False),
    sa.Column("ended", sa.Double, nullable=True),
    sa.Column("ok", sa.Boolean, nullable=True),
)

RATED = "limits.rated"
EXCLUSIVE = "limits.exclusive"
FRAGILE = "limits.fragile"
BREAKER = Breaker(failures=3, reset_after=1.0)

_engines: dict[str, sa.Engine] = {}
_lock = threading.Lock()


def _engine(url: str) -> sa.Engine:
    with _lock:
        if url not in _engines:
            # A small pool: the shared PostgreSQL has few connections to spare.
            _engines[url] = sa.create_engine(normalize_url(url), pool_size=2, max_overflow=2)
        return _engines[url]


class _Run:
    """Records one handler run: a row at the start, its end time and outcome at the end."""

    def __init__(self, url: str, task: str, ctx: JobContext) -> None:
        self._engine = _engine(url)
        with self._engine.begin() as conn:
            row = {"task": task, "job_id": ctx.job_id, "attempt": ctx.claim.attempt}
            self._id = conn.execute(runs.insert().values(began=time.time(), **row))
            self._id = self._id.inserted_primary_key[0]  # type: ignore[index]

    def end(self, ok: bool) -> None:
        with self._engine.begin() as conn:
            stmt = runs.update().where(runs.c.id == self._id)
            conn.execute(stmt.values(ended=time.time(), ok=ok))


def make_app(**overrides: Any) -> LedgerQ:
    """A LedgerQ with the limited tasks; ``overrides`` are settings (e.g. ``database_url``)."""
    app = LedgerQ(**overrides)
    url = app.settings.database_url.get_secret_value()

    @app.task(name=RATED, queue="rated", rate_limit="50/s")
    def rated(ctx: JobContext, n: int) -> None:
        """Nothing but the limit: 50 starts per second across the fleet."""
        _Run(url, RATED, ctx).end(True)

    @app.task(
        name=EXCLUSIVE,
        queue="exclusive",
        concurrency_limit=2,
        concurrency_key=lambda customer, seconds: customer,
    )
    def exclusive(ctx: JobContext, customer: str, seconds: float) -> None:
        """A report: at most two per customer at a time."""
        run = _Run(url, f"{EXCLUSIVE}[{customer}]", ctx)
        time.sleep(seconds)
        run.end(True)

    @app.task(name=FRAGILE, queue="fragile", max_attempts=5, retry_backoff=0.2, breaker=BREAKER)
    def fragile(ctx: JobContext, n: int) -> None:
        """Fails while the flag file exists (a dependency that is down)."""
        run = _Run(url, FRAGILE, ctx)
        down = Path(os.environ.get("LIMITS_FLAG", "/nonexistent")).exists()
        run.end(not down)
        if down:
            raise ConnectionError("the dependency is down")

    return app


app = make_app()
