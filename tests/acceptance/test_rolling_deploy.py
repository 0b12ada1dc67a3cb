"""Rolling deploys with real worker processes: a worker whose application does not know a task
puts that task's jobs back without spending an attempt, and a worker of the newer release runs
them once; with no live worker declaring the task for ``UNKNOWN_TASK_GRACE`` the job is buried
with a clear error."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.store.tables import jobs
from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.test_failover import FLEET_ENV, Fleet
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

Make = Callable[[str], Ledger]
OLD_APP = "tests.acceptance.old_app:app"


def row(db: Ledger, job_id: int) -> Any:
    stmt = sa.select(
        jobs.c.state, jobs.c.attempt, jobs.c.max_attempts, jobs.c.error, jobs.c.worker_id
    ).where(jobs.c.id == job_id)
    with db.engine.connect() as conn:
        return conn.execute(stmt).one()


def error_of(db: Ledger, job_id: int) -> dict[str, Any]:
    text = row(db, job_id).error
    return json.loads(text) if text else {}


def test_an_old_worker_puts_a_new_task_back_and_a_new_worker_runs_it_once(
    ledger: Make, procs: Procs
) -> None:
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        old = procs.worker(db.url, "--concurrency", "2", env=FLEET_ENV, app=OLD_APP)
        wait_until(lambda: len(fleet.active()) == 1, timeout=30, what="the old worker registered")
        job_id = db.effects.record_effect.enqueue("deploy-a").job_id  # max_attempts 1
        began = time.monotonic()

        # The old worker keeps putting it back, each time without spending an attempt.
        def put_back_twice() -> Any:
            seen = row(db, job_id)
            waiting = seen.state in ("scheduled", "queued")
            return seen if waiting and error_of(db, job_id).get("put_backs", 0) >= 2 else None

        seen = wait_until(put_back_twice, timeout=30, what="two put-backs")
        # Each claim raised ``attempt`` (the fencing token) and the put-back ``max_attempts``:
        # the one run the job was enqueued with is still ahead of it.
        assert seen.max_attempts - seen.attempt == 1, seen
        assert error_of(db, job_id)["kind"] == "unknown_task"
        assert db.effect_count() == 0
        # The new release comes up beside the old one and runs the job once.
        new = procs.worker(db.url, "--concurrency", "2", env=FLEET_ENV)
        wait_until(lambda: row(db, job_id).state == "succeeded", timeout=60, what="job ran")
        print(f"rolling deploy: job ran {time.monotonic() - began:.1f} s after enqueue")
        done = row(db, job_id)
        assert done.error is None
        assert set(db.effect_rows()) == {"deploy-a"} and db.duplicate_rows() == []
        assert db.effect_rows()["deploy-a"].attempt == done.attempt
        # History: every earlier attempt was a put-back by the old worker (none failed), and
        # the first real attempt, the last one, succeeded on the new worker.
        wait_until(
            lambda: len(fleet.admin.list_assignments(job_id=job_id)) == done.attempt,
            timeout=10,
            what="the history written",
        )
        history = sorted(fleet.admin.list_assignments(job_id=job_id), key=lambda r: r["attempt"])
        assert [r["outcome"] for r in history[:-1]] == ["requeued"] * (done.attempt - 1)
        assert history[-1]["outcome"] == "succeeded"
        assert history[-1]["worker_id"] == done.worker_id != history[0]["worker_id"]
        assert "job of a task this worker does not know put back" in old.log()
        for proc in (old, new):
            proc.signal(signal.SIGTERM)
            assert proc.wait(30) == 0, proc.log()[-3000:]
    finally:
        fleet.close()


def test_a_task_no_live_worker_declares_is_buried_after_the_grace(
    ledger: Make, procs: Procs
) -> None:
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        env = {**FLEET_ENV, "LEDGERQ_UNKNOWN_TASK_GRACE": "2"}
        old = procs.worker(db.url, "--concurrency", "2", env=env, app=OLD_APP)
        wait_until(lambda: len(fleet.active()) == 1, timeout=30, what="the old worker registered")
        job_id = db.effects.record_effect.enqueue("never").job_id
        began = time.monotonic()
        wait_until(lambda: row(db, job_id).state == "dead", timeout=30, what="the job buried")
        took = time.monotonic() - began
        assert took >= 2.0, f"buried after {took:.2f} s, before the grace of 2 s"
        error = error_of(db, job_id)
        assert error["kind"] == "unknown_task"
        assert "'effects.record_effect'" in error["message"]
        assert "no live worker" in error["message"]
        assert db.effect_count() == 0
        assert "job buried: no live worker knows its task" in old.log()
        old.signal(signal.SIGTERM)
        assert old.wait(30) == 0, old.log()[-3000:]
    finally:
        fleet.close()
