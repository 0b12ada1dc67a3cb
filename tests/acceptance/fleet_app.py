"""The application of the fleet-of-hosts test: each job records which host ran its body and
when it started and ended, in the ledger's own database and through the worker's own database
URL (for a namespaced worker, through its host's link), so a test can tell exactly which bodies
ran, where and how often.

``runs``: one row per start and one per end of a body (key, job id, attempt, host, phase). The
host is ``FLEET_HOST`` from the worker's environment. Run it with
``ledgerq --app tests.acceptance.fleet_app:app worker start``; tests build their own
``LedgerQ`` and call ``register`` (both register the same task name).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ, Task
from ledgerq.store.engine import create_engine

WORK = "fleet.work"

metadata = sa.MetaData()

runs = sa.Table(
    "runs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("host", sa.String(40), nullable=False),
    sa.Column("phase", sa.String(5), nullable=False),  # start | end
)


#: Connections each worker process keeps for the records (as many again may overflow).
POOL_SIZE = 2

_engines: dict[str, sa.Engine] = {}
_engines_lock = threading.Lock()


def _engine(url: str) -> sa.Engine:
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = create_engine(url, pool_size=POOL_SIZE)
        return engine


def _write(engine: sa.Engine, ctx: JobContext, key: str, phase: str) -> None:
    row = {
        "key": key,
        "job_id": ctx.job_id,
        "attempt": ctx.claim.attempt,  # the fencing token of this run
        "host": os.environ.get("FLEET_HOST", "root"),
        "phase": phase,
    }
    with engine.begin() as conn:
        conn.execute(runs.insert().values(row))


def register(app: LedgerQ) -> Task[Any, Any]:
    """Register the ``fleet.work`` task with ``app``; return it."""
    url = app.settings.database_url.get_secret_value()

    @app.task(name=WORK, max_attempts=5, retry_backoff=0.05)
    def work(ctx: JobContext, key: str, seconds: float = 0.0) -> str:
        """Record the start (only if ``seconds``: a job that does no work has no middle to be
        caught in), wait ``seconds``, record the end. Returns ``key``."""
        engine = _engine(url)
        if seconds:
            _write(engine, ctx, key, "start")
            time.sleep(seconds)
        _write(engine, ctx, key, "end")
        return key

    return work


app = LedgerQ()
register(app)
