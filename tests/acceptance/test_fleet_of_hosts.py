"""A fleet of hosts: three worker hosts, each a network namespace with its own address that
reaches PostgreSQL and Redis only through its own link (``fleet_hosts.py``), two
``ledgerq worker start`` processes on each, on PostgreSQL with the Redis transport.

1. Throughput and fair share: a few thousand short jobs all finish exactly once, and every
   host runs a fair share of them.
2. One host partitioned mid-run, then healed: its jobs are failed over by the fleet, its late
   completions refused, nothing lost or completed twice; after the heal its workers register
   again and take jobs.
3. One host's two processes SIGKILLed mid-run: the fleet fails them over and runs their jobs,
   nothing lost; only jobs the ledger had running on that host at the kill ran twice, at most
   (SPEC: at-least-once).

Every body records its start and end, and the host it ran on, through that host's link
(``fleet_app.py``). Short fleet timings as in ``test_failover.py``, on a PostgreSQL cluster of
the module's own (``private_postgres``) and a private Redis. Needs root (``ip netns``); skipped
otherwise, failed under ``CI=1``.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from ledgerq.core.fleet import WorkerState
from ledgerq.store.engine import IDLE_IN_TRANSACTION_SECONDS
from ledgerq.store.migrate import migrate
from tests.acceptance import fleet_app
from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.fleet_hosts import (
    CONCURRENCY,
    HOSTS,
    PROCESSES,
    WORKER_ENV,
    HostFleet,
    linked_hosts,
    refused,
    worker_logs,
)
from tests.acceptance.private_servers import PrivatePostgres
from tests.acceptance.test_failover import CHECK, TTL
from tests.helpers import wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)

#: Slack on the failover bounds below for this shared 2-core machine: at a load of 15-20 (other
#: engineers' suites, and this file beside another under ``-n 2``) a survivor's failover check
#: every 0.3 s, and the server's idle-session timer, ran up to 2.3 s late. Without a failover
#: the jobs would wait for the reconciler's STUCK_AFTER (15 min), so the bounds still tell.
SLACK = 3.0
#: SIGKILL: a dead worker's jobs are back in the queue within TTL + one check interval
#: (SPEC 2.5); measured 1.2-1.8 s at a load of 12-20, 3.97 s once beside another test file.
KILL_BOUND = TTL + CHECK + SLACK
#: A partition may catch a worker inside a transaction, whose row locks the server holds until
#: it closes the idle session (docs/architecture.md, "Failover"): max(TTL, 5 s) + check;
#: measured 1.4-1.6 s, or 5.2-5.5 s when a transaction was open at the cut (7.56 s at load 20).
CUT_BOUND = max(TTL, IDLE_IN_TRANSACTION_SECONDS) + CHECK + SLACK
#: Short jobs for the partition and the kill: long enough that each host always has bodies
#: in the middle of running.
JOB_SECONDS = 0.05


#: The throughput run's timings: no failover is wanted there, and at a load of 18 a worker
#: starved past the short TTL (1.5 s) was failed over by its peers and its job ran twice.
#: The heartbeat stays short: it carries the peers' rates the pacer steers by.
STEADY_ENV = {**WORKER_ENV, "LEDGERQ_WORKER_TTL": "10", "LEDGERQ_FAILOVER_CHECK_INTERVAL": "1"}


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PrivatePostgres]:
    """A PostgreSQL cluster of this module's own. Six workers of four slots hold up to about
    fourteen connections each (pools and their overflow): on the shared server, beside other
    tests, they ran into its ``max_connections`` (100) and the test saw jobs fail with "too
    many clients already"; here they have 300 to themselves."""
    server = PrivatePostgres()
    try:
        server.configure("max_connections = 300")
        server.stop_immediately()  # max_connections takes a restart
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture
def hosts_fleet(
    private_postgres: PrivatePostgres, procs: Procs, redis_server: RedisServer
) -> Iterator[HostFleet]:
    """A fresh, migrated ledger database in the private cluster, three linked hosts and a
    view of them (their workers not started yet)."""
    name = f"fleet_{secrets.token_hex(4)}"
    private_postgres.sql(f"CREATE DATABASE {name}")
    url = sa.make_url(private_postgres.url).set(database=name)
    db = Ledger(url.render_as_string(hide_password=False))
    try:
        migrate(db.engine)
        fleet_app.metadata.create_all(db.engine)
        with linked_hosts(procs, HOSTS, db.url, redis_server.url) as hosts:
            view = HostFleet(db, redis_server, procs, hosts)
            try:
                yield view
            finally:
                view.close()
    finally:
        db.close()


#: Jobs of the throughput run.
JOBS = 2000
#: The least share of the jobs each host must run. A fair share is a third (the pacer keeps
#: each worker's share per slot near its peers', docs/architecture.md "Fair sharing"), but it
#: steers only while the backlog lasts, a few seconds here, on rates a heartbeat old; on this
#: shared 2-core machine at a load of 10-40 the hosts' shares ranged 26-40 % in about 20 runs.
#: The bound, 60 % of a fair share, is what a host kept from its share (unable to pull ids,
#: or braked by a pacer gone wrong) fails, and a host starved by the machine for a while
#: passes.
MIN_SHARE = 0.20


def test_throughput_and_fair_share_per_host(hosts_fleet: HostFleet) -> None:
    fleet = hosts_fleet
    fleet.start(STEADY_ENV)
    began = time.monotonic()
    keys = fleet.enqueue("k", JOBS)
    wait_until(lambda: fleet.succeeded() == JOBS, timeout=60, what="every job done", interval=0.1)
    elapsed = time.monotonic() - began
    fleet.stop([w for host in fleet.hosts.values() for w in host.workers])

    fleet.assert_each_job_succeeded_once(JOBS)
    # Each claimed once: no worker was failed over or lost a job.
    assert {row.attempt for row in fleet.db.jobs().values()} == {1}, fleet.explain()
    ends = fleet.runs("end")
    assert sorted(r.key for r in ends) == sorted(keys)  # each body ran exactly once
    shares = Counter(r.host for r in ends)
    fractions = {h: shares[h] / JOBS for h in HOSTS}
    print(
        f"\nfleet of hosts: {JOBS} jobs in {elapsed:.2f} s = {JOBS / elapsed:.0f} jobs/s"
        f" (3 hosts x {PROCESSES} workers x {CONCURRENCY} slots, load {os.getloadavg()[0]:.1f});"
        f" shares {', '.join(f'{h} {f:.1%}' for h, f in fractions.items())}"
    )
    assert min(fractions.values()) >= MIN_SHARE, fractions


def test_a_partitioned_host_is_failed_over_refused_and_rejoins(hosts_fleet: HostFleet) -> None:
    fleet = hosts_fleet
    fleet.start()
    cut_host = fleet.hosts["b"]
    cut_ids = fleet.worker_ids("b")
    first = fleet.enqueue("p", 1200, JOB_SECONDS)
    wait_until(
        lambda: fleet.succeeded() >= 150 and len(fleet.running_on(cut_ids)) >= 2,
        timeout=30,
        what="host b busy mid-run",
    )
    cut_at, cut = datetime.now(UTC), time.monotonic()
    cut_host.host.cut()
    try:
        to_event, put_back = fleet.failed_over(cut_ids, cut_at, CUT_BOUND + 10)
        # Nothing stays on host b. A claim it sent just before the cut can commit after its
        # worker's failover read the running jobs (on a loaded machine a heartbeat 1.5 s late
        # is failed over at the cut itself); that job keeps the dead worker's id until its
        # lease (the TTL) runs out and the orphan rescue puts it back (test_worker_store:
        # a claim committed after its worker's failover is rescued after its lease).
        wait_until(
            lambda: not fleet.running_on(cut_ids),
            timeout=TTL + CHECK + SLACK,
            what="host b holds no running job",
        )
        # The others carry on without host b.
        during = fleet.succeeded()
        goal = min(during + 100, len(first))  # (a fast machine may drain them all first)
        wait_until(lambda: fleet.succeeded() >= goal, timeout=20, what="progress")
        assert all(fleet.fleet.admin.get_worker(w).state is WorkerState.DEAD for w in cut_ids)
    finally:
        cut_host.host.heal()
    healed = time.monotonic()
    for worker in cut_host.workers:
        wait_until(
            lambda w=worker: "declared dead by the fleet" in w.log(), timeout=30, what="noticed"
        )
    wait_until(
        lambda: all(fleet.fleet.admin.get_worker(w).state is WorkerState.ACTIVE for w in cut_ids),
        timeout=30,
        what="host b's workers registered again",
    )
    to_rejoined = time.monotonic() - healed
    second = fleet.enqueue("q", 200, JOB_SECONDS)
    total = len(first) + len(second)
    wait_until(lambda: fleet.succeeded() == total, timeout=60, what="every job done")
    history = fleet.assert_each_job_succeeded_once(total)

    # Host b rejoined: its workers ran jobs enqueued after the heal.
    ledger_rows = fleet.db.jobs()
    second_ids = {r.job_id for r in fleet.runs("end") if r.key.startswith("q")}
    after = Counter(ledger_rows[i].worker_id for i in second_ids)
    assert all(after[w] > 0 for w in cut_ids), after

    # What host b held at the cut was failed over, and its results never stood.
    cut_off = {
        (job_id, r["attempt"])
        for job_id, rows in history.items()
        for r in rows
        if r["worker_id"] in cut_ids and r["outcome"] == "failed_over"
    }
    moved = {job_id for job_id, _ in cut_off}
    # (Once, at a load of 29, a job of the second wave was failed over from a rejoined worker
    # of host b: short TTLs on a starved machine. Such jobs count as moved too.)
    assert put_back and put_back <= moved, (put_back - moved, fleet.explain())
    won = {
        j: r["attempt"] for j, rows in history.items() for r in rows if r["outcome"] == "succeeded"
    }
    assert all(won[j] > attempt for j, attempt in cut_off)  # a later attempt's result stands
    # Bodies ran twice only for jobs host b held at the cut, at most twice.
    starts = Counter(r.job_id for r in fleet.runs("start"))
    twice = {i for i, n in starts.items() if n > 1}
    assert max(starts.values()) <= 2 and twice <= moved, (twice - moved, worker_logs(cut_host))
    # Each body that ended on host b after it was cut off sent its completion after the heal,
    # and the fence refused it (the new owner's result stands, checked above).
    late = {r.job_id for r in fleet.runs("end") if (r.job_id, r.attempt) in cut_off}
    wait_until(lambda: refused(cut_host) >= len(late), timeout=20, what="late completions refused")
    print(
        f"\npartition of host b: cut -> both workers failed over, their jobs back in the"
        f" queue {to_event:.2f} s (bound {CUT_BOUND:.1f} s); link down {healed - cut:.1f} s;"
        f" heal -> registered again {to_rejoined:.2f} s; {len(put_back)} jobs failed over"
        f" ({len(moved - put_back)} more later),"
        f" {len(twice)} bodies ran twice, {len(late)} ended on host b, {refused(cut_host)} late"
        f" completions refused;"
        f" after the heal host b ran {sum(after[w] for w in cut_ids)} of {len(second)} jobs"
    )
    assert to_event <= CUT_BOUND
    fleet.stop([w for host in fleet.hosts.values() for w in host.workers])


def test_a_hosts_killed_processes_are_failed_over(hosts_fleet: HostFleet) -> None:
    fleet = hosts_fleet
    fleet.start()
    victim = fleet.hosts["c"]
    victim_ids = fleet.worker_ids("c")
    keys = fleet.enqueue("x", 800, JOB_SECONDS)
    wait_until(
        lambda: fleet.succeeded() >= 150 and len(fleet.running_on(victim_ids)) >= 2,
        timeout=30,
        what="host c busy mid-run",
    )
    killed_at = datetime.now(UTC)
    for worker in victim.workers:
        worker.signal(signal.SIGKILL)
    for worker in victim.workers:
        assert worker.wait(10) == -signal.SIGKILL
    to_event, put_back = fleet.failed_over(victim_ids, killed_at, KILL_BOUND + 10)
    assert not fleet.running_on(victim_ids)
    wait_until(lambda: fleet.succeeded() == len(keys), timeout=60, what="every job done")
    history = fleet.assert_each_job_succeeded_once(len(keys))

    moved = {
        job_id
        for job_id, rows in history.items()
        for r in rows
        if r["worker_id"] in victim_ids and r["outcome"] == "failed_over"
    }
    # (The ledger's running jobs read just after the kill are no snapshot of this: a claim or
    # a completion host c sent before it died can still commit a moment later.)
    assert moved == put_back, (moved, put_back)
    # At-least-once (SPEC 2.3): a body killed mid-run, or one that ended before its completion
    # was written (the completer writes in groups), runs again; either way a job the ledger
    # had running on host c at the kill, and only once more.
    starts = Counter(r.job_id for r in fleet.runs("start"))
    twice = {i for i, n in starts.items() if n > 1}
    ends = Counter(r.job_id for r in fleet.runs("end"))
    assert twice <= moved and max(starts.values()) <= 2, twice - moved
    assert set(starts) == set(ends) == set(fleet.db.jobs())
    assert max(ends.values()) <= 2 and {i for i, n in ends.items() if n > 1} <= twice
    print(
        f"\nSIGKILL of host c's {PROCESSES} workers: kill -> both failed over, their"
        f" {len(moved)} jobs back in the queue {to_event:.2f} s (bound {KILL_BOUND:.1f} s);"
        f" {len(twice)} bodies ran twice ({sum(1 for n in ends.values() if n > 1)} ended twice)"
    )
    assert to_event <= KILL_BOUND
