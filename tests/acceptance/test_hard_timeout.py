"""Timeouts really stop: a handler blocked in C past its timeout (``time.sleep``, which no
interrupt reaches) that swallows the interrupt and then writes its effect must never write
it. The worker records the timeout, abandons the thread and recycles its process (a plain
worker replaces itself with ``execv``; a manager's child exits for a fresh one), so the blocked
code dies with it; the job is retried once, and the worker goes on taking work."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.test_failover import Fleet
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

#: How long the first attempt blocks: past its 1 s timeout and the 1 s before the thread is
#: written off, with room for a slow machine to finish the recycle first.
BLOCKED_SECONDS = 6.0
ENV = {"LEDGERQ_HEARTBEAT_INTERVAL": "0.5", "LEDGERQ_WORKER_TTL": "5"}


def block_then_work_on(db: Ledger, job_id: int) -> tuple[float, set[str]]:
    """Once ``job_id``'s first attempt has started (and blocks), enqueue 100 other jobs and
    wait until they and the job's retry are done; return when it started and their keys."""
    wait_until(db.start_rows, timeout=30, what="the blocked attempt started")
    started = time.monotonic()
    # Work that arrives meanwhile is done all the same (by the recycled process).
    others = {f"o{i}" for i in range(100)}
    db.effects.record_effect.enqueue_many([(key,) for key in sorted(others)])
    wait_until(
        lambda: db.jobs()[job_id].state == "succeeded" and db.effect_count() == len(others) + 1,
        timeout=60,
        what="the retry and the other jobs done",
    )
    return started, others


@pytest.mark.parametrize("managed", [False, True], ids=["plain-worker", "managed-child"])
def test_a_job_blocked_in_c_past_its_timeout_never_writes_its_effect(
    ledger: Callable[[str], Ledger], procs: Procs, managed: bool
) -> None:
    db = ledger("postgresql")
    extra = ("--processes", "1") if managed else ()
    worker = procs.worker(db.url, "--concurrency", "4", *extra, env=ENV)
    job_id = db.effects.hung.enqueue("blocked", BLOCKED_SECONDS).job_id
    started, others = block_then_work_on(db, job_id)
    # Proving a negative: wait until the blocked call would have returned, and then some.
    time.sleep(max(started + BLOCKED_SECONDS + 1.5 - time.monotonic(), 0))
    row = db.jobs()[job_id]
    # The retry is the second attempt that ran. The recycling process may have claimed it
    # already and put it back unstarted at its exit (seen under a full suite's load): the
    # put-back keeps the attempt, the fencing token, so the next claim counts one more, and
    # counts it in ``postponed``, which costs no attempt.
    assert row.state == "succeeded" and row.attempt - row.postponed == 2, row
    written_by = db.effect_rows()["blocked"].attempt
    assert written_by >= 2, "the blocked first attempt wrote its effect"
    assert db.duplicate_rows() == [], "the abandoned attempt wrote its effect"
    starts = sorted(a for k, _, a in db.start_rows() if k == "blocked")
    assert starts[0] == 1 and starts[-1] == written_by and len(starts) <= 3
    assert set(db.effect_rows()) == others | {"blocked"}
    log = worker.log()
    assert "recycling the worker" in log
    assert worker.running(), log[-3000:]
    if not managed:
        assert "replacing this worker process with a fresh one" in log


#: The GIL-holding attempt's hold: well past the manager's hang limit (TTL / 2 = 3 s).
HELD_GIL_SECONDS = 10.0
HANG_ENV = {"LEDGERQ_HEARTBEAT_INTERVAL": "0.5", "LEDGERQ_WORKER_TTL": "6"}


def test_a_job_holding_the_gil_past_its_timeout_dies_with_its_process(
    ledger: Callable[[str], Ledger], procs: Procs
) -> None:
    """Code holding the GIL stops every thread of its process, its timeout's too: only the
    manager can stop it. The child falls silent, is killed as hung within TTL / 2 (before its
    leases run out), failed over at once, and the retry runs while the other child goes on."""
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        manager = procs.worker(db.url, "--processes", "2", "--concurrency", "4", env=HANG_ENV)
        job_id = db.effects.hung.enqueue("hog", HELD_GIL_SECONDS, True).job_id
        started, others = block_then_work_on(db, job_id)
        retried_after = time.monotonic() - started
        time.sleep(max(started + HELD_GIL_SECONDS + 1.5 - time.monotonic(), 0))
        row = db.jobs()[job_id]
        assert (row.state, row.attempt) == ("succeeded", 2)
        assert db.effect_rows()["hog"].attempt == 2
        assert db.duplicate_rows() == [], "the GIL-holding attempt wrote its effect"
        assert set(db.effect_rows()) == others | {"hog"}
        [event] = fleet.admin.list_failover_events()
        assert event["detected_by"].startswith("manager ") and "hung for" in event["detected_by"]
        assert event["job_ids"]["requeued"] == [job_id]
        assert retried_after < HELD_GIL_SECONDS, f"retried only after {retried_after:.1f} s"
        log = manager.log()
        assert "worker process hung" in log
        assert manager.running(), log[-3000:]
        print(f"GIL-holding job retried {retried_after:.2f} s after it started")
    finally:
        fleet.close()
