"""The process-count sweep's plan and its CPU probes: each ledgerq target once per process
count (``BENCH_LEDGERQ_PROCS`` for bench_ledgerq.py), and around every run a ``cpu_probe`` that
reads the bench database's backends (PostgreSQL) and Redis's INFO CPU."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ledgerq.benchmark import cpu_probe
from ledgerq.benchmark.bench_runner import BENCH_REDIS_URL, Target
from ledgerq.store.engine import create_engine

#: Database hosts whose backends run on this machine (their CPU is read from /proc).
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
#: bench_ledgerq.py's variable for its number of worker processes.
PROCS_ENV = "BENCH_LEDGERQ_PROCS"
_BACKENDS_SQL = (
    "SELECT pid FROM pg_stat_activity WHERE datname = :db AND pid <> pg_backend_pid()"
    " AND backend_type = 'client backend'"
)


def sweep_targets(targets: Sequence[Target], procs: Sequence[int]) -> list[Target]:
    """Every target at every process count, process count first (so a trial sweeps upward)."""
    return [
        replace(t, env={**t.env, PROCS_ENV: str(p)}, labels={**t.labels, "procs": p})
        for p in procs
        for t in targets
    ]


def ledger_url(target: Target) -> sa.URL | None:
    """The target's PostgreSQL ledger, past PgBouncer when it has a direct URL, if its server
    runs on this machine; else None (no database CPU is measured)."""
    raw = target.env.get("LEDGERQ_DATABASE_DIRECT_URL") or target.env.get("LEDGERQ_DATABASE_URL")
    if not raw or not raw.startswith("postgres"):
        return None
    url = sa.make_url(raw)
    # Backends are read from this host's /proc: a server elsewhere has no CPU figure here.
    return url if (url.host or "localhost") in LOCAL_HOSTS else None


class Watcher:
    """``Runner.watch`` for the sweep: one database connection (to the server's ``postgres``
    database, so it is never counted) and one Redis client, kept for the whole sweep."""

    def __init__(self) -> None:
        self._engines: dict[str, sa.Engine] = {}
        self._redis: Any = None

    def __call__(
        self, target: Target, pgids: Path
    ) -> contextlib.AbstractContextManager[Callable[[], dict[str, Any]]]:
        return self._watch(target, pgids)

    @contextlib.contextmanager
    def _watch(self, target: Target, pgids: Path) -> Iterator[Callable[[], dict[str, Any]]]:
        sources = cpu_probe.Sources(self._backend_pids(target), self._redis_info)
        load = os.getloadavg()[0]  # how busy the machine was as the run began
        with cpu_probe.watching(pgids, sources) as probe:
            yield lambda: {**_fields(probe.readings()), "load_1m": round(load, 2)}

    def _backend_pids(self, target: Target) -> Callable[[], list[int]] | None:
        url = ledger_url(target)
        if url is None:
            return None
        admin = url.set(database="postgres").render_as_string(hide_password=False)
        if admin not in self._engines:
            self._engines[admin] = create_engine(admin, pool_size=1)
        engine, name = self._engines[admin], url.database

        def pids() -> list[int]:
            with engine.connect() as conn:
                rows = conn.execute(sa.text(_BACKENDS_SQL), {"db": name})
                return [int(r[0]) for r in rows]

        return pids

    def _redis_info(self) -> dict[str, Any]:
        if self._redis is None:
            import redis  # the bench extra; the sweep's own reading, not ledgerq's transport

            self._redis = redis.Redis.from_url(BENCH_REDIS_URL, socket_timeout=2.0)
        info: dict[str, Any] = self._redis.info("cpu")
        return info

    def close(self) -> None:
        """Close the connections."""
        for engine in self._engines.values():
            engine.dispose()
        if self._redis is not None:
            self._redis.close()


def _fields(readings: cpu_probe.Readings | None) -> dict[str, Any]:
    if readings is None:
        return {"cpu_note": "no worker process was seen"}
    return readings.as_row()
