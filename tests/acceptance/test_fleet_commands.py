"""Fleet commands across processes: ``worker stop`` and ``stop-all`` reach running worker
processes through the database; ``worker health`` exits 0 for a healthy fleet and 1 for a
worker that is alive but stuck (not consuming while jobs wait)."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable

import pytest

from tests.acceptance.conftest import Ledger, Procs
from tests.helpers import wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(300)

Make = Callable[[str], Ledger]
FAST = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "0.2",
    "LEDGERQ_WORKER_TTL": "2",
    "LEDGERQ_FAILOVER_CHECK_INTERVAL": "0.5",
    "LEDGERQ_WORKER_HEALTH_CHECK_INTERVAL": "0.3",
    "LEDGERQ_POLL_INTERVAL": "0.1",
}


def listed(procs: Procs, db: Ledger, *flags: str) -> list[dict[str, object]]:
    done = procs.run(db.url, "--json", "worker", "list", *flags, env=FAST)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_stop_and_stop_all_reach_worker_processes(backend: str, ledger: Make, procs: Procs) -> None:
    db = ledger(backend)
    workers = [procs.worker(db.url, "--concurrency", "2", env=FAST) for _ in range(3)]
    rows = wait_until(
        lambda: found if len(found := listed(procs, db)) == 3 else None,
        timeout=30,
        what="3 workers",
    )
    assert {int(str(r["pid"])) for r in rows} == {w.pid for w in workers}
    wait_until(
        lambda: procs.run(db.url, "worker", "health", env=FAST).returncode == 0,
        timeout=20,
        what="a healthy fleet",
    )
    # One worker: stopped through the database, the others keep running.
    first = next(r for r in rows if r["pid"] == workers[0].pid)
    done = procs.run(db.url, "worker", "stop", "--worker-id", str(first["worker_id"]), env=FAST)
    assert done.returncode == 0, done.stderr
    assert workers[0].wait(15) == 0, workers[0].log()
    assert workers[1].running() and workers[2].running()
    assert "stop requested through the database" in workers[0].log()
    # Everyone else, gracefully; a job in flight finishes first.
    job_id = db.effects.slow.enqueue("in-flight", 1.0).job_id
    wait_until(db.start_rows, timeout=20, what="the job started")
    done = procs.run(db.url, "--json", "worker", "stop-all", "--graceful", env=FAST)
    assert json.loads(done.stdout) == {"stop_requested": 2, "mode": "graceful"}
    for worker in workers[1:]:
        assert worker.wait(20) == 0, worker.log()
    assert db.jobs()[job_id].state == "succeeded"
    assert {r["state"] for r in listed(procs, db, "--all")} == {"stopped"}
    assert listed(procs, db) == []
    # With no active worker the fleet is not healthy.
    assert procs.run(db.url, "worker", "health", env=FAST).returncode == 1
    bad = procs.run(db.url, "worker", "stop", "--worker-id", "nobody", env=FAST)
    assert bad.returncode == 1 and "no active worker" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_health_exits_1_for_a_worker_alive_but_not_consuming(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    worker = procs.worker(
        db.url, "--concurrency", "1", "--prefetch", "0", "--grace", "0.5", env=FAST
    )
    wait_until(lambda: listed(procs, db), timeout=30, what="registered")
    (row,) = listed(procs, db)
    worker_id = str(row["worker_id"])
    healthy = procs.run(db.url, "worker", "health", "--worker-id", worker_id, env=FAST)
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    # Its only slot blocks on a long job while more jobs wait: alive, heartbeating, stuck.
    db.effects.slow.enqueue("blocker", 120.0)
    wait_until(db.start_rows, timeout=20, what="the blocking job started")
    db.effects.record_effect.enqueue_many([("waiting-1",), ("waiting-2",)])

    def unhealthy() -> str | None:
        done = procs.run(db.url, "worker", "health", "--worker-id", worker_id, env=FAST)
        return done.stdout if done.returncode == 1 else None

    report = wait_until(unhealthy, timeout=30, what="health exits 1")
    assert "not consuming" in report
    (row,) = listed(procs, db)
    assert row["state"] == "active" and float(str(row["heartbeat_age_seconds"])) < 2
    as_json = procs.run(db.url, "--json", "worker", "health", env=FAST)
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["healthy"] is False
    worker.signal(signal.SIGTERM)  # the blocked job is put back after the grace period
    assert worker.wait(20) == 0


def test_stop_travels_through_redis_when_present(
    ledger: Make, procs: Procs, redis_server: RedisServer
) -> None:
    db = ledger("sqlite")
    # Heartbeats 20 s apart: through the database alone a stop would take up to 20 s.
    slow_beat = {
        "LEDGERQ_HEARTBEAT_INTERVAL": "20",
        "LEDGERQ_WORKER_TTL": "60",
        "LEDGERQ_REDIS_URL": redis_server.url,
    }
    workers = [procs.worker(db.url, env=slow_beat) for _ in range(2)]
    rows = wait_until(
        lambda: found if len(found := listed(procs, db)) == 2 else None,
        timeout=30,
        what="2 workers",
    )
    first = next(r for r in rows if r["pid"] == workers[0].pid)
    asked_at = time.monotonic()
    done = procs.run(
        db.url, "worker", "stop", "--worker-id", str(first["worker_id"]), env=slow_beat
    )
    assert done.returncode == 0, done.stderr
    assert workers[0].wait(10) == 0, workers[0].log()
    assert time.monotonic() - asked_at < 10
    # Redis only woke it up: the stop it obeyed is the one it read from the database.
    assert "stop requested through the database" in workers[0].log()
    assert "control message" in workers[0].log()
    assert workers[1].running()
    done = procs.run(db.url, "worker", "stop-all", "--graceful", env=slow_beat)
    assert done.returncode == 0, done.stderr
    assert workers[1].wait(10) == 0, workers[1].log()


def test_stop_this_host_graceful_by_default_immediate_on_request(
    ledger: Make, procs: Procs
) -> None:
    """A default stop lets the running job finish; ``--this-host --immediate`` skips the
    grace: the job goes back to the queue at once (its attempt kept) and the worker exits."""
    db = ledger("sqlite")
    patient = procs.worker(db.url, "--concurrency", "1", "--grace", "30", env=FAST)
    (row,) = wait_until(lambda: listed(procs, db), timeout=30, what="registered")
    finishing = db.effects.slow.enqueue("finishing", 1.5).job_id
    wait_until(db.start_rows, timeout=20, what="the job started")
    done = procs.run(db.url, "worker", "stop", "--worker-id", str(row["worker_id"]), env=FAST)
    assert done.returncode == 0 and "(graceful)" in done.stdout, done.stderr
    assert patient.wait(20) == 0, patient.log()
    assert db.jobs()[finishing].state == "succeeded"

    hurried = procs.worker(db.url, "--concurrency", "1", "--grace", "60", env=FAST)
    wait_until(lambda: listed(procs, db), timeout=30, what="registered again")
    cut = db.effects.slow.enqueue("cut-short", 60.0).job_id
    wait_until(lambda: len(db.start_rows()) == 2, timeout=20, what="the long job started")
    asked_at = time.monotonic()
    done = procs.run(db.url, "--json", "worker", "stop", "--this-host", "--immediate", env=FAST)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mode"] == "immediate"
    assert hurried.wait(20) == 0, hurried.log()
    assert time.monotonic() - asked_at < 15  # far inside the 60 s grace
    job = db.jobs()[cut]
    assert (job.state, job.attempt) == ("queued", 1)
