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
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

#: How long the first attempt blocks: past its 1 s timeout and the 1 s before the thread is
#: written off, with room for a slow machine to finish the recycle first.
BLOCKED_SECONDS = 6.0
ENV = {"LEDGERQ_HEARTBEAT_INTERVAL": "0.5", "LEDGERQ_WORKER_TTL": "5"}


@pytest.mark.parametrize("managed", [False, True], ids=["plain-worker", "managed-child"])
def test_a_job_blocked_in_c_past_its_timeout_never_writes_its_effect(
    ledger: Callable[[str], Ledger], procs: Procs, managed: bool
) -> None:
    db = ledger("postgresql")
    extra = ("--processes", "1") if managed else ()
    worker = procs.worker(db.url, "--concurrency", "4", *extra, env=ENV)
    job_id = db.effects.hung.enqueue("blocked", BLOCKED_SECONDS).job_id
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
    # Proving a negative: wait until the blocked call would have returned, and then some.
    time.sleep(max(started + BLOCKED_SECONDS + 1.5 - time.monotonic(), 0))
    row = db.jobs()[job_id]
    assert (row.state, row.attempt) == ("succeeded", 2)
    assert db.effect_rows()["blocked"].attempt == 2
    assert db.duplicate_rows() == [], "the abandoned attempt wrote its effect"
    assert sorted(a for k, _, a in db.start_rows() if k == "blocked") == [1, 2]
    assert set(db.effect_rows()) == others | {"blocked"}
    log = worker.log()
    assert "recycling the worker" in log
    assert worker.running(), log[-3000:]
    if not managed:
        assert "replacing this worker process with a fresh one" in log
