"""Long jobs spread over the fleet: a worker does not claim long jobs ahead of its slots
while another worker idles (the automatic prefetch is 0 for long jobs and before any job
duration is known). Seen before: 6 jobs of 20 s on 2 workers x 4 slots all went to one worker
(4 running, 2 prefetched), and with ``--processes 2 -c 2`` all 4 to one child, 2 of them
20 s late."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest

from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin
from tests.acceptance.conftest import Ledger, Procs
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

JOB_SECONDS = 4.0
#: The last job must end within about one job's time of the enqueue, not two.
BOUND_SECONDS = JOB_SECONDS * 1.6


def active_workers(url: str) -> int:
    engine = create_engine(url, pool_size=1)
    try:
        return len(SqlFleetAdmin(engine).list_workers())
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("processes", "workers", "concurrency", "jobs"),
    [(1, 2, 4, 8), (2, 1, 2, 4)],
    ids=["two-workers", "one-manager-two-children"],
)
def test_long_jobs_finish_in_about_one_job_time(
    ledger: Callable[[str], Ledger],
    procs: Procs,
    processes: int,
    workers: int,
    concurrency: int,
    jobs: int,
) -> None:
    db = ledger("postgresql")
    managed = ("--processes", str(processes)) if processes > 1 else ()
    for _ in range(workers):
        procs.worker(db.url, "--concurrency", str(concurrency), *managed)
    wait_until(
        lambda: active_workers(db.url) == processes * workers,
        timeout=60,
        what="every worker process registered",
    )
    began = time.monotonic()
    db.effects.slow.enqueue_many([(f"long{i}", JOB_SECONDS) for i in range(jobs)])
    wait_until(
        lambda: db.states() == {"succeeded": jobs},
        timeout=60,
        what="every long job done",
        interval=0.1,
    )
    took = time.monotonic() - began
    holders = Counter(row.worker_id for row in db.jobs().values())
    print(f"\n{jobs} jobs of {JOB_SECONDS:g} s took {took:.1f} s; per worker: {dict(holders)}")
    assert took < BOUND_SECONDS, (took, holders)
    assert sorted(holders.values()) == [concurrency] * (processes * workers), holders
