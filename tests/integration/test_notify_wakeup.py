"""PostgreSQL LISTEN/NOTIFY: an idle worker starts a new job long before its next poll."""

from __future__ import annotations

import time
from collections.abc import Callable

from ledgerq import JobContext, JobState, LedgerQ
from tests.helpers import running_worker, wait_until


def test_idle_worker_is_woken_by_notify(make_database_url: Callable[[str], str]) -> None:
    app = LedgerQ(database_url=make_database_url("postgresql"))
    started: list[float] = []

    @app.task()
    def ping(ctx: JobContext) -> None:
        started.append(time.monotonic())

    try:
        # A 60 s poll interval: only the notification can explain a prompt start.
        with running_worker(app, poll_interval_seconds=60.0) as worker:
            for _ in range(3):
                enqueued = time.monotonic()
                job_id = ping.enqueue().job_id
                wait_until(lambda j=job_id: app.jobs.get(j).state is JobState.SUCCEEDED, timeout=10)
                assert started[-1] - enqueued < 5.0
            assert worker.stats.outcomes["succeeded"] == 3
    finally:
        app.close()
