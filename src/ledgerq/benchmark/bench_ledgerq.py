"""ledgerq as one more peer of the harness protocol (see the peers' harness.py): run as
``python -m ledgerq.benchmark.bench_ledgerq MODE`` with the harness on ``PYTHONPATH`` and the
ledger in ``LEDGERQ_DATABASE_URL``; prints one JSON line, exactly as ``bench_<peer>.py`` does.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ledgerq.app.task import Task
from ledgerq.benchmark import bench_tasks
from ledgerq.store.engine import create_engine

#: Jobs per ``enqueue_many`` call, as the harness's BULK_CHUNK for every peer's bulk API.
BULK_CHUNK = 1000
#: Worker processes per mode, and slots (threads) per process: 2 x 8 = 16 for io.
WORKER_PROCESSES = 2
CONCURRENCY = 8
BULK_LABEL = f"Task.enqueue_many(x{BULK_CHUNK})"

_BACKEND_LABELS = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "sqlite": "sqlite",
    "mysql": "mariadb",
    "mariadb": "mariadb",
}


def backend_label(url: str) -> str:
    """``postgresql``, ``sqlite`` or ``mariadb`` for a database URL (driver suffix ignored)."""
    scheme = url.split(":", 1)[0].split("+", 1)[0]
    return _BACKEND_LABELS.get(scheme, scheme)


BACKEND = backend_label(bench_tasks.app.settings.database_url.get_secret_value())
REDIS_URL = bench_tasks.app.settings.redis_url
#: The harness's name of this target (its workers' log files): the bench's target key when the
#: bench runs it, so the Redis and the Redis-outage targets keep apart.
NAME = os.environ.get("BENCH_LEDGERQ_NAME") or (
    f"ledgerq_{BACKEND}" + ("_redis" if REDIS_URL is not None else "")
)
_TASKS: dict[str, Task[..., Any]] = {"noop": bench_tasks.noop_task, "sleep": bench_tasks.sleep_task}

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
# The attempts' history goes too: job ids restart, and old rows would shadow the new attempts.
_CLEAR_SQL = {
    "postgresql": ("TRUNCATE jobs, job_assignments RESTART IDENTITY",),
    "mariadb": ("TRUNCATE TABLE jobs", "TRUNCATE TABLE job_assignments"),
    "sqlite": ("DELETE FROM jobs", "DELETE FROM job_assignments"),
}


def _create_database() -> None:
    """Create the bench database if it is missing (PostgreSQL, MariaDB) or its folder (SQLite)."""
    url = bench_tasks.app.parts.store.engine.url
    name = url.database or ""
    direct = bench_tasks.app.settings.database_direct_url
    if direct is not None:  # behind PgBouncer: its database is created over the direct URL
        url = sa.make_url(direct.get_secret_value())
        name = url.database or ""
    if BACKEND == "sqlite":
        if name and name != ":memory:":
            Path(name).parent.mkdir(parents=True, exist_ok=True)
        return
    if not _IDENTIFIER.fullmatch(name):
        raise ValueError(f"bench database name {name!r} must be a plain identifier")
    admin_db = "postgres" if BACKEND == "postgresql" else ""  # "" = no database; None keeps it
    admin = create_engine(url.set(database=admin_db).render_as_string(hide_password=False))
    try:
        with admin.connect() as plain:
            conn = plain.execution_options(isolation_level="AUTOCOMMIT")
            if BACKEND == "postgresql":
                found = conn.exec_driver_sql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'")
                if found.scalar() is None:
                    conn.exec_driver_sql(f"CREATE DATABASE {name}")
            else:
                conn.exec_driver_sql(f"CREATE DATABASE IF NOT EXISTS {name}")
    finally:
        admin.dispose()


def setup() -> dict[str, Any]:
    """Create the bench database if missing, then create or upgrade its tables."""
    _create_database()
    status = bench_tasks.app.migrate()
    return {"backend": BACKEND, "revision": status.current}


def reset() -> None:
    """Empty the jobs table and the attempts' history (not timed)."""
    with bench_tasks.app.parts.store.engine.begin() as conn:
        for statement in _CLEAR_SQL[BACKEND]:
            conn.exec_driver_sql(statement)
    if REDIS_URL is not None:
        import redis  # the bench's own bookkeeping; ledgerq's redis code stays in its adapter

        client = redis.Redis.from_url(REDIS_URL.get_secret_value())
        try:
            keys = list(client.scan_iter(f"{bench_tasks.app.settings.namespace}:*"))
            if keys:
                client.delete(*keys)
        except redis.ConnectionError:
            pass  # Redis unreachable (the outage backend): it holds nothing of this run
        finally:
            client.close()


def _connect() -> None:
    """Open the pool's first connection, so connection set-up stays out of the timed loop."""
    with bench_tasks.app.parts.store.engine.connect():
        pass


def enqueue_single(kind: str, n: int) -> float:
    """Enqueue ``n`` jobs one by one (one transaction each); return elapsed seconds."""
    task = _TASKS[kind]
    _connect()
    started = time.perf_counter()
    for _ in range(n):
        task.enqueue()
    return time.perf_counter() - started


def enqueue_bulk(kind: str, n: int) -> float:
    """Enqueue ``n`` jobs with ``enqueue_many`` in calls of 1,000; return elapsed seconds."""
    task = _TASKS[kind]
    _connect()
    started = time.perf_counter()
    for size in bench_tasks.harness().chunks(n, BULK_CHUNK):
        task.enqueue_many([()] * size)
    return time.perf_counter() - started


prefill = enqueue_bulk


def paced(rate: float, duration: float) -> tuple[int, float]:
    """Enqueue ``lat`` jobs at ``rate`` per second for ``duration`` seconds."""
    _connect()
    count, elapsed = bench_tasks.harness().paced_sync(bench_tasks.lat_task.enqueue, rate, duration)
    return int(count), float(elapsed)


def worker_processes() -> int:
    """``BENCH_LEDGERQ_PROCS`` (the sweep of ``ledgerq bench --procs``), else 2."""
    raw = os.environ.get("BENCH_LEDGERQ_PROCS", "")
    if not raw:
        return WORKER_PROCESSES
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"BENCH_LEDGERQ_PROCS must be a whole number >= 1, got {raw!r}")
    return int(raw)


def worker_cmds(mode: str) -> list[list[str]]:
    """Two (``BENCH_LEDGERQ_PROCS``) ``ledgerq worker start`` processes of 8 slots each, for
    every mode, unpinned as a user's workers start by default. ``BENCH_LEDGERQ_PIN_CPU=1``
    (``ledgerq bench --pinned``) pins each to a CPU of its own while one is free
    (``--pin-cpu``; see runtime/affinity.py: past the CPUs, the rest run unpinned)."""
    ledgerq = Path(sys.executable).with_name("ledgerq")
    entry = [str(ledgerq)] if ledgerq.exists() else [sys.executable, "-m", "ledgerq.cli.main"]
    argv = [
        *entry,
        "--app",
        "ledgerq.benchmark.bench_tasks:app",
        "worker",
        "start",
        "--concurrency",
        str(CONCURRENCY),
        "--queues",
        bench_tasks.QUEUE,
        "--pin-cpu" if os.environ.get("BENCH_LEDGERQ_PIN_CPU", "0") == "1" else "--no-pin-cpu",
    ]
    return [list(argv) for _ in range(worker_processes())]


if __name__ == "__main__":
    bench_tasks.harness().main(sys.modules[__name__])
