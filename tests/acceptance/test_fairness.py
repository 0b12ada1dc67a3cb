"""Fair sharing: three workers on one queue over 30,000 no-op jobs each take a share within 5 %
of the mean, every job exactly once. With no-op jobs the whole drain lasts a few seconds, so a
worker that falls behind early must win its share back in jobs (see docs/architecture.md)."""

from __future__ import annotations

import signal
import statistics
from collections import Counter
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from ledgerq.store.tables import jobs
from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.test_failover import FLEET_ENV, Fleet
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(600)

Make = Callable[[str], Ledger]
JOBS = 30_000


def test_three_workers_share_30000_jobs_within_5_percent(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        workers = [procs.worker(db.url, "--concurrency", "8", env=FLEET_ENV) for _ in range(3)]
        wait_until(lambda: len(fleet.active()) == 3, timeout=30, what="three workers")
        for start in range(0, JOBS, 5000):
            db.effects.noop.enqueue_many([(n,) for n in range(start, start + 5000)])
        timeline: list[str] = []  # jobs processed per worker over time, to explain a failure

        def all_done() -> bool:
            workers_now = sorted(fleet.admin.list_workers(), key=lambda w: w.worker_id)
            counts = [w.jobs_processed for w in workers_now]
            if not timeline or timeline[-1] != str(counts):
                timeline.append(str(counts))
            return db.states() == {"succeeded": JOBS}

        wait_until(all_done, timeout=300, what="every job done", interval=0.3)
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait(30) == 0, worker.log()
        with db.engine.connect() as conn:
            rows = conn.execute(sa.select(jobs.c.worker_id, jobs.c.attempt)).all()
        assert {attempt for _, attempt in rows} == {1}  # each job claimed once
        shares = Counter(worker_id for worker_id, _ in rows)
        mean = statistics.mean(shares.values())
        spread = max(abs(n - mean) / mean for n in shares.values())
        print(f"\nshares of {JOBS} jobs: {sorted(shares.values())}, max spread {spread:.2%}")
        print("timeline:", " ".join(timeline))
        warnings = [line for w in workers for line in w.log().splitlines() if "warning" in line]
        assert len(shares) == 3 and spread <= 0.05, (shares, timeline, warnings[-20:])
    finally:
        fleet.close()
