"""Several worker hosts on one machine: each a network namespace whose only way to the ledger's
PostgreSQL and to Redis is its own link, through a forwarder for each service
(``tests/acceptance/netns.py``). Cutting one host's link partitions that host alone.
``HostFleet`` is a test's view of workers on such hosts running ``fleet_app``.

``linked_hosts`` makes them and tears everything down even when the test fails: the processes
first (one may be cut off), then the forwarders (their upstream sessions end), then the links
and the namespaces.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ledgerq import LedgerQ
from ledgerq.store.tables import jobs
from tests.acceptance import fleet_app
from tests.acceptance.conftest import Ledger, Proc, Procs
from tests.acceptance.netns import Forwarder, IsolatedHost
from tests.acceptance.test_failover import FLEET_ENV, Fleet
from tests.helpers import wait_until
from tests.redis_server import RedisServer


def _address(url: str, default_port: int) -> tuple[str, int]:
    parsed = sa.make_url(url)
    return parsed.host or "127.0.0.1", parsed.port or default_port


class LinkedHost:
    """One namespaced host, named ``name``, with a forwarder to PostgreSQL and one to Redis
    on the root side of its link."""

    def __init__(self, name: str, host: IsolatedHost, postgres: Forwarder, redis: Forwarder):
        self.name = name
        self.host = host
        self.postgres = postgres
        self.redis = redis
        #: The worker processes started on this host, in order.
        self.workers: list[Proc] = []

    def database_url(self, url: str) -> str:
        """``url`` (a loopback PostgreSQL) as seen from inside this host."""
        through = sa.make_url(url).set(host=self.host.root_address, port=self.postgres.port)
        return through.render_as_string(hide_password=False)

    def redis_url(self, url: str) -> str:
        """``url`` (a loopback Redis) as seen from inside this host."""
        through = sa.make_url(url).set(host=self.host.root_address, port=self.redis.port)
        return through.render_as_string(hide_password=False)

    def start_worker(
        self, procs: Procs, url: str, redis_url: str, *args: str, env: dict[str, str], app: str
    ) -> Proc:
        """Start ``ledgerq worker start ARGS`` inside this host, on its forwarded database and
        Redis URLs, with ``FLEET_HOST`` naming the host and ``env`` added."""
        host_env = {**env, "LEDGERQ_REDIS_URL": self.redis_url(redis_url), "FLEET_HOST": self.name}
        proc = procs.worker(
            self.database_url(url), *args, env=host_env, app=app, prefix=self.host.prefix
        )
        self.workers.append(proc)
        return proc

    @property
    def pids(self) -> set[int]:
        """The process ids of this host's workers."""
        return {proc.pid for proc in self.workers}


@contextlib.contextmanager
def linked_hosts(
    procs: Procs, names: Sequence[str], postgres_url: str, redis_url: str
) -> Iterator[list[LinkedHost]]:
    """One ``LinkedHost`` per name, reaching ``postgres_url``'s and ``redis_url``'s servers
    (both on loopback). Skips (fails under ``CI=1``) where namespaces cannot be made."""
    made: list[IsolatedHost] = []
    forwarders: list[Forwarder] = []
    hosts: list[LinkedHost] = []
    try:
        for name in names:
            host = IsolatedHost.create(f"{os.getpid()}{name}")
            made.append(host)
            postgres = Forwarder(host.root_address, _address(postgres_url, 5432))
            forwarders.append(postgres)
            redis = Forwarder(host.root_address, _address(redis_url, 6379))
            forwarders.append(redis)
            hosts.append(LinkedHost(name, host, postgres, redis))
        yield hosts
    finally:
        procs.kill_all()
        for forwarder in forwarders:
            forwarder.close()
        for host in made:
            host.close()


#: The fleet ``HostFleet`` runs: hosts a, b and c, two workers of four slots on each, on
#: ``fleet_app``, with the short fleet timings of ``test_failover.py`` and Redis's namespace.
APP = "tests.acceptance.fleet_app:app"
NAMESPACE = "fleet"
HOSTS = ("a", "b", "c")
PROCESSES = 2
CONCURRENCY = 4
WORKER_ENV = {
    **FLEET_ENV,
    "LEDGERQ_NAMESPACE": NAMESPACE,
    "LEDGERQ_RECONCILE_INTERVAL": "1",
    "LEDGERQ_REQUEUE_AFTER": "1",
}


class HostFleet:
    """Three linked hosts, their workers, the ledger and a producer that enqueues directly."""

    def __init__(self, db: Ledger, redis: RedisServer, procs: Procs, hosts: list[LinkedHost]):
        self.db = db
        self.redis = redis
        self.procs = procs
        self.hosts = {host.name: host for host in hosts}
        self.fleet = Fleet(db.url)
        self.app = LedgerQ(database_url=db.url, redis_url=redis.url, namespace=NAMESPACE)
        self.work = fleet_app.register(self.app)
        #: Worker id -> host name, once every worker registered.
        self.host_of: dict[str, str] = {}

    def start(self, env: dict[str, str] = WORKER_ENV) -> None:
        """Two workers on each host with ``env``; wait until all six registered."""
        began = time.monotonic()
        for host in self.hosts.values():
            for i in range(PROCESSES):
                host.start_worker(
                    self.procs,
                    self.db.url,
                    self.redis.url,
                    *("--concurrency", str(CONCURRENCY)),
                    # Its sessions are named after it in pg_stat_activity (libpq's default).
                    env={**env, "PGAPPNAME": f"fleet-{host.name}{i}"},
                    app=APP,
                )
        count = len(self.hosts) * PROCESSES
        active = wait_until(
            lambda: (a := self.fleet.active()) and len(a) == count and a,
            timeout=60,
            what=f"{count} workers registered",
        )
        by_pid = {pid: host.name for host in self.hosts.values() for pid in host.pids}
        self.host_of = {worker_id: by_pid[pid] for pid, worker_id in active.items()}
        print(f"\n{count} workers registered in {time.monotonic() - began:.1f} s", end="")

    def worker_ids(self, name: str) -> set[str]:
        """The worker ids of host ``name``."""
        return {w for w, h in self.host_of.items() if h == name}

    def enqueue(self, prefix: str, count: int, seconds: float = 0.0) -> list[str]:
        """``count`` jobs keyed ``prefix0..``, in bulk inserts of 1000; returns the keys."""
        keys = [f"{prefix}{i}" for i in range(count)]
        for start in range(0, count, 1000):
            self.work.enqueue_many([(key, seconds) for key in keys[start : start + 1000]])
        return keys

    def succeeded(self) -> int:
        """How many jobs the ledger has ``succeeded``."""
        return self.db.states().get("succeeded", 0)

    def running_on(self, worker_ids: set[str]) -> set[int]:
        """Ids of the jobs the ledger has ``running`` on one of ``worker_ids``."""
        stmt = sa.select(jobs.c.id).where(
            jobs.c.state == "running", jobs.c.worker_id.in_(sorted(worker_ids))
        )
        with self.db.engine.connect() as conn:
            return set(conn.execute(stmt).scalars())

    def runs(self, phase: str) -> list[sa.Row[Any]]:
        """Every recorded ``start`` or ``end`` of a body."""
        r = fleet_app.runs
        stmt = sa.select(r.c.key, r.c.job_id, r.c.attempt, r.c.host).where(r.c.phase == phase)
        with self.db.engine.connect() as conn:
            return list(conn.execute(stmt))

    def failovers(self, worker_ids: set[str]) -> dict[str, dict[str, Any]]:
        """The failover event of each of ``worker_ids`` that has one."""
        events = self.fleet.admin.list_failover_events(limit=1000)
        return {e["worker_id"]: e for e in events if e["worker_id"] in worker_ids}

    def failed_over(
        self, worker_ids: set[str], since: datetime, timeout: float
    ) -> tuple[float, set[int]]:
        """Wait for the failover of every one of ``worker_ids``; return the seconds from
        ``since`` to the last one (database clock: the event is the same transaction that put
        the jobs back in the queue) and the jobs they put back (none buried: the task has 5
        attempts)."""
        events = wait_until(
            lambda: (e := self.failovers(worker_ids)) and len(e) == len(worker_ids) and e,
            timeout=timeout,
            what="every worker failed over",
        )
        last = max(e["detected_at"] for e in events.values())
        assert all(not e["job_ids"]["dead"] for e in events.values()), events  # 5 attempts
        moved = {job_id for e in events.values() for job_id in e["job_ids"]["requeued"]}
        return (last - since).total_seconds(), moved

    def stop(self, workers: list[Proc]) -> None:
        """SIGTERM ``workers``; each must exit 0."""
        began = time.monotonic()
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait(30) == 0, worker.log()[-3000:]
        print(f"\n{len(workers)} workers stopped in {time.monotonic() - began:.1f} s", end="")

    def assert_each_job_succeeded_once(self, count: int) -> dict[int, list[dict[str, Any]]]:
        """All ``count`` jobs succeeded, each by exactly one attempt in the history; returns
        the history by job."""
        assert self.db.states() == {"succeeded": count}, self.db.failures()
        history: dict[int, list[dict[str, Any]]] = {}
        for row in self.fleet.admin.list_assignments():
            history.setdefault(row["job_id"], []).append(row)
        wins = Counter(
            job_id for job_id, rows in history.items() for r in rows if r["outcome"] == "succeeded"
        )
        assert len(history) == count and set(wins.values()) == {1}, wins.most_common(3)
        return history

    def explain(self) -> str:
        """What went other than planned, for an assertion message: attempts that did not
        succeed, failover events and the workers' warnings."""
        odd = [r for r in self.fleet.admin.list_assignments() if r["outcome"] != "succeeded"]
        events = self.fleet.admin.list_failover_events(limit=20)
        warnings = [
            line
            for host in self.hosts.values()
            for proc in host.workers
            for line in proc.log().splitlines()
            if "warning" in line.lower()
        ]
        return f"attempts {odd[:20]}\nevents {events}\nwarnings {warnings[-30:]}"

    def close(self) -> None:
        """Close the producer and the registry view (the processes are ``linked_hosts``'s)."""
        self.app.close()
        self.fleet.close()


def refused(host: LinkedHost) -> int:
    """How many completions the fence refused to ``host``'s workers, by their logs."""
    return sum(proc.log().count("stale completion refused") for proc in host.workers)


def worker_logs(host: LinkedHost) -> str:
    return "\n".join(proc.log()[-3000:] for proc in host.workers)
