"""PostgreSQL LISTEN/NOTIFY: an idle worker starts a new job long before its next poll."""

from __future__ import annotations

import time
from collections.abc import Callable

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.store.listener import PgNotifyWaker
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


def test_a_lazy_waker_listens_from_its_first_wait(make_database_url: Callable[[str], str]) -> None:
    """A Redis worker's fallback listens only once used: until then no NOTIFY wakes it."""
    app = LedgerQ(database_url=make_database_url("postgresql"))

    @app.task()
    def ping(ctx: JobContext) -> None:
        return None

    waker = PgNotifyWaker(app.parts.store.engine, {"default"}, lazy=True)
    try:
        ping.enqueue()
        assert not waker.started
        # The first wait starts listening and asks for one more claim at once: the job above
        # was committed before LISTEN, so no notification of it can ever come.
        began = time.monotonic()
        assert waker.wait(30.0)
        assert time.monotonic() - began < 5.0 and waker.started
        assert not waker.wait(0.2)  # nothing new since
        ping.enqueue()
        assert waker.wait(10.0)  # now a notification wakes it
    finally:
        waker.close()
        app.close()


def test_a_closed_lazy_waker_never_starts(make_database_url: Callable[[str], str]) -> None:
    app = LedgerQ(database_url=make_database_url("postgresql"))
    waker = PgNotifyWaker(app.parts.store.engine, {"default"}, lazy=True)
    try:
        waker.close()
        began = time.monotonic()
        assert waker.wait(1.0)  # a closed waker returns at once (its event is set)
        assert not waker.started and time.monotonic() - began < 0.5
    finally:
        app.close()
