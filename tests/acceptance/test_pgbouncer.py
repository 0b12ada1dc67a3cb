"""Worker processes through PgBouncer in transaction pooling mode (a private PgBouncer whose
pool, ``tests.pgbouncer_server.POOL_SIZE`` server sessions, is smaller than the workers'
connections): with
``LEDGERQ_DB_POOLER=pgbouncer`` they drain a queue exactly once, with and without a direct URL
for LISTEN; without the setting a command names the fix instead of failing obscurely."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from tests.acceptance.conftest import Ledger, Procs
from tests.conftest import pgbouncer_of

pytestmark = pytest.mark.timeout(300)

Make = Callable[[str], Ledger]
JOBS = 2000


def test_workers_drain_through_pgbouncer_exactly_once(ledger: Make, procs: Procs) -> None:
    db = ledger("pgbouncer")
    bouncer = pgbouncer_of(db.url)
    keys = [f"k{i:05d}" for i in range(JOBS)]
    db.effects.record_effect.enqueue_many([(key,) for key in keys])
    assert db.states() == {"queued": JOBS}
    before = bouncer.transactions()

    # Two workers listen over the direct URL; the third has none and polls.
    direct = db.env["LEDGERQ_DATABASE_DIRECT_URL"]
    polling = {"LEDGERQ_DB_POOLER": "pgbouncer", "LEDGERQ_TEST_EFFECTS_URL": direct}
    envs = [db.env, db.env, polling]
    workers = [procs.worker(db.url, "--concurrency", "4", "--burst", env=env) for env in envs]
    deadline = time.monotonic() + 120
    for worker in workers:
        assert worker.wait(max(deadline - time.monotonic(), 0.1)) == 0, worker.log()

    jobs = db.jobs()
    assert db.states() == {"succeeded": JOBS}, db.failures()
    # Each job was claimed once (the attempt is the claim counter) and its effect ran once.
    assert {row.attempt for row in jobs.values()} == {1}
    assert set(db.effect_rows()) == set(keys)
    assert db.effect_count() == JOBS
    assert db.duplicate_rows() == []
    assert len({row.worker_id for row in jobs.values()}) >= 2
    # The ledger's traffic went through PgBouncer: at least a claim and a completion per
    # group of jobs (a claim takes at most 32), shared by POOL_SIZE server sessions.
    assert bouncer.transactions() - before > 2 * JOBS // 32
    for worker in workers:
        assert "prepared statement" not in worker.log()
        assert "Traceback" not in worker.log()


def test_a_pooler_left_unnamed_is_named_and_a_named_one_is_counted_right(
    ledger: Make, procs: Procs
) -> None:
    db = ledger("pgbouncer")
    done = procs.run(db.url, "queue", "stats", "--json")
    assert done.returncode != 0
    assert "LEDGERQ_DB_POOLER=pgbouncer" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr

    told = procs.run(db.url, "queue", "stats", "--json", env=db.env)
    assert told.returncode == 0, told.stderr
    json.loads(told.stdout)

    # Behind PgBouncer a worker opens only its LISTEN connection on the server itself.
    pool = procs.run(db.url, "worker", "validate-pool", "--json", env=db.env)
    assert pool.returncode == 0, pool.stderr
    assert json.loads(pool.stdout)["fleet_connection_demand"] == 1
