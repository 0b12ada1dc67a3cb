"""The application the acceptance tests run in real worker processes.

Its tasks leave visible side effects in the ledger's own database, written through an engine
of their own, so a test can tell exactly what ran and how often:

- ``effects``: one row per key, written when a task *finishes* its work. The key is the
  primary key; a second write of the same key goes to ``duplicates`` instead, so a job whose
  effect ran twice is detected, never hidden.
- ``starts``: one row per run (job id, attempt), written when ``effects.slow`` starts, to
  prove a job was running when a test stopped or killed its worker.

The tests create these tables (``metadata.create_all``). Run it with
``ledgerq --app tests.acceptance.effects_app:app worker start``; the database comes from
``LEDGERQ_DATABASE_URL``. Tests build their own instance with ``make_app(database_url=...)``:
both register the same task names.
"""

from __future__ import annotations

import contextlib
import ctypes
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ, Task
from ledgerq.store.engine import create_engine
from ledgerq.store.tables import jobs

metadata = sa.MetaData()

effects = sa.Table(
    "effects",
    metadata,
    sa.Column("key", sa.String(100), primary_key=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
)
duplicates = sa.Table(
    "duplicates",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
)
starts = sa.Table(
    "starts",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(100), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
)

RECORD_EFFECT = "effects.record_effect"
SLOW = "effects.slow"
YIELDING = "effects.yielding"
STUBBORN = "effects.stubborn"
NOOP = "effects.noop"
RESILIENT = "effects.resilient"
HUNG = "effects.hung"

_engines: dict[str, sa.Engine] = {}
_engines_lock = threading.Lock()


def effects_engine(url: str) -> sa.Engine:
    """One engine per database URL and process, shared by every handler thread."""
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = create_engine(url, pool_size=8)
        return engine


def record(engine: sa.Engine, ctx: JobContext, key: str) -> None:
    """Write ``key``'s effect, or a ``duplicates`` row if it was written before."""
    row = {"key": key, "job_id": ctx.job_id, "attempt": ctx.claim.attempt}  # the fencing token
    try:
        with engine.begin() as conn:
            conn.execute(effects.insert().values(row))
    except sa.exc.IntegrityError:
        with engine.begin() as conn:
            conn.execute(duplicates.insert().values(row))


def work(engine: sa.Engine, ctx: JobContext, key: str, seconds: float, rerun: float | None) -> bool:
    """Record the start, then work ``seconds`` (``rerun`` from the second attempt on, if
    given). False if the worker asked the run to stop first."""
    with engine.begin() as conn:
        conn.execute(starts.insert().values(key=key, job_id=ctx.job_id, attempt=ctx.claim.attempt))
    if ctx.attempt > 1 and rerun is not None:
        seconds = rerun
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0 and not ctx.stop_requested:
        time.sleep(min(remaining, 0.02))
    return not ctx.stop_requested


def stubborn_body(engine: sa.Engine, ctx: JobContext, key: str, seconds: float) -> str:
    """Record the start; the first attempt sleeps ``seconds`` ignoring every stop request and
    ownership change, later attempts return at once. Returns ``key@attempt``."""
    with engine.begin() as conn:
        conn.execute(starts.insert().values(key=key, job_id=ctx.job_id, attempt=ctx.claim.attempt))
    if ctx.attempt == 1:
        time.sleep(seconds)
    return f"{key}@{ctx.attempt}"


def block_in_c(
    engine: sa.Engine, ctx: JobContext, key: str, seconds: float, *, hold_gil: bool = False
) -> None:
    """Record the start; the first attempt then blocks in C (``time.sleep``, which no
    interrupt reaches) for ``seconds``, swallows the interrupt as careless code does, and
    records ``key``'s effect; later attempts record it at once. With ``hold_gil`` it blocks
    in libc's ``sleep`` called through ``ctypes.PyDLL``, which keeps the GIL all along, as a
    C extension that never releases it does: no other thread of the process runs."""
    with engine.begin() as conn:
        conn.execute(starts.insert().values(key=key, job_id=ctx.job_id, attempt=ctx.claim.attempt))
    if ctx.attempt == 1:
        with contextlib.suppress(BaseException):  # the careless handler under test
            if hold_gil:
                ctypes.PyDLL(None).sleep(math.ceil(seconds))
            else:
                time.sleep(seconds)
    record(engine, ctx, key)


def _wait_until_put_back(engine: sa.Engine, ctx: JobContext) -> None:
    # Poll the ledger until this attempt no longer holds the job.
    held = sa.select(jobs.c.id).where(
        jobs.c.id == ctx.job_id, jobs.c.attempt == ctx.claim.attempt, jobs.c.state == "running"
    )
    while True:
        with engine.connect() as conn:
            if conn.execute(held).first() is None:
                return
        time.sleep(0.02)


def _park_forever() -> None:
    # The worker gave up on this run and put the job back: never write its effect and never
    # report an outcome that could race the put-back. The thread dies with the process.
    threading.Event().wait()


@dataclass(frozen=True)
class EffectsApp:
    """An application and its tasks."""

    app: LedgerQ
    record_effect: Task[Any, Any]
    slow: Task[Any, Any]
    yielding: Task[Any, Any]
    stubborn: Task[Any, Any]
    noop: Task[Any, Any]
    resilient: Task[Any, Any]
    hung: Task[Any, Any]


def make_app(**overrides: Any) -> EffectsApp:
    """A LedgerQ with the effect tasks; ``overrides`` are settings (e.g. ``database_url``)."""
    app = LedgerQ(**overrides)
    # Behind PgBouncer the effects (the tests' records, not ledgerq's traffic) go direct.
    url = (
        os.environ.get("LEDGERQ_TEST_EFFECTS_URL")
        or (app.settings.database_direct_url or app.settings.database_url).get_secret_value()
    )

    @app.task(name=RECORD_EFFECT, max_attempts=1)
    def record_effect(ctx: JobContext, key: str) -> str:
        """Record ``key``'s effect at once."""
        record(effects_engine(url), ctx, key)
        return key

    @app.task(name=SLOW, max_attempts=1)
    def slow(ctx: JobContext, key: str, seconds: float, rerun_seconds: float | None = None) -> str:
        """Record the start, work ``seconds`` (``rerun_seconds`` from the second attempt on,
        if given), then record ``key``'s effect. A run the worker asks to stop (shutdown past
        its grace period) parks without an effect until the process exits."""
        engine = effects_engine(url)
        if not work(engine, ctx, key, seconds, rerun_seconds):
            _park_forever()
        record(engine, ctx, key)
        return key

    @app.task(name=YIELDING, max_attempts=1)
    def yielding(
        ctx: JobContext, key: str, seconds: float, rerun_seconds: float | None = None
    ) -> str | None:
        """Like ``slow``, but a run asked to stop returns (without an effect) as soon as the
        worker has put its job back, freeing its slot as a cooperative handler would."""
        engine = effects_engine(url)
        if not work(engine, ctx, key, seconds, rerun_seconds):
            _wait_until_put_back(engine, ctx)
            return None
        record(engine, ctx, key)
        return key

    @app.task(name=STUBBORN, max_attempts=3)
    def stubborn(ctx: JobContext, key: str, seconds: float) -> str:
        """Record the start; the first attempt then sleeps ``seconds`` ignoring every stop
        request and ownership change (a handler that never checks its context), later
        attempts return at once. Returns ``key@attempt``."""
        return stubborn_body(effects_engine(url), ctx, key, seconds)

    @app.task(name=NOOP, max_attempts=1)
    def noop(ctx: JobContext, n: int, seconds: float = 0.0) -> None:
        """Do nothing, or wait ``seconds`` as a short I/O-bound job (throughput and fairness
        runs)."""
        time.sleep(seconds)

    @app.task(name=RESILIENT, max_attempts=10, retry_backoff=0.05)
    def resilient(ctx: JobContext, key: str) -> str:
        """``record_effect`` retried up to 10 times (its engine may lose its connections)."""
        record(effects_engine(url), ctx, key)
        return key

    @app.task(name=HUNG, max_attempts=3, timeout=1.0, retry_backoff=0.05)
    def hung(ctx: JobContext, key: str, seconds: float, hold_gil: bool = False) -> str:
        """``block_in_c``: past its timeout on the first attempt, at once later."""
        block_in_c(effects_engine(url), ctx, key, seconds, hold_gil=hold_gil)
        return key

    return EffectsApp(app, record_effect, slow, yielding, stubborn, noop, resilient, hung)


app = make_app().app
