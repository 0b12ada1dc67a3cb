"""PostgreSQL LISTEN/NOTIFY: an idle worker starts a new job long before its next poll."""

from __future__ import annotations

import secrets
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, JobState, LedgerQ, Task
from ledgerq.store.engine import create_engine
from ledgerq.store.postgres.listener import LISTENER_NAME, PgNotifyWaker
from ledgerq.store.postgres.statements import NOTIFY_CHANNEL
from tests.conftest import POSTGRES_URL
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


@dataclass
class Lazy:
    """A lazy waker on a fresh PostgreSQL ledger, and a task to enqueue there. The queue is the
    test's own: the tests' ledgers share one database, so NOTIFYs of the others reach it too."""

    app: LedgerQ
    ping: Task[..., None]
    waker: PgNotifyWaker

    def listening(self, pid: int | None) -> bool:
        """Whether backend ``pid`` is an open listening connection."""
        stmt = sa.text(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = :pid AND application_name = :name"
        )
        with self.app.parts.store.engine.connect() as conn:
            return conn.execute(stmt, {"pid": pid, "name": LISTENER_NAME}).scalar_one() == 1


@pytest.fixture
def lazy(make_database_url: Callable[[str], str]) -> Iterator[Lazy]:
    app = LedgerQ(database_url=make_database_url("postgresql"))
    queue = f"lazy-{secrets.token_hex(4)}"

    @app.task(queue=queue)
    def ping(ctx: JobContext) -> None:
        return None

    waker = PgNotifyWaker(app.parts.store.engine, {queue}, lazy=True)
    yield Lazy(app, ping, waker)
    waker.close()
    app.close()


def test_a_lazy_waker_listens_from_its_first_wait(lazy: Lazy) -> None:
    """A Redis worker's fallback listens only once used: until then no NOTIFY wakes it."""
    lazy.ping.enqueue()
    assert not lazy.waker.started and lazy.waker.listener_pid is None
    # The first wait starts listening and asks for one more claim at once: the job above was
    # committed before LISTEN, so no notification of it can ever come.
    began = time.monotonic()
    assert lazy.waker.wait(30.0)
    assert time.monotonic() - began < 5.0 and lazy.waker.started
    assert lazy.listening(lazy.waker.listener_pid)
    assert not lazy.waker.wait(0.2)  # nothing new since
    lazy.ping.enqueue()
    assert lazy.waker.wait(10.0)  # now a notification wakes it


def test_a_resting_waker_closes_its_connection_and_listens_again_when_used(lazy: Lazy) -> None:
    """Redis answers again: the fallback rests, so NOTIFYs stop waking this worker."""
    assert lazy.waker.wait(5.0)
    first = lazy.waker.listener_pid
    assert lazy.listening(first)
    lazy.waker.rest()
    assert not lazy.waker.started
    wait_until(lambda: not lazy.listening(first), timeout=5, what="LISTEN closed")
    assert lazy.waker.wait(30.0)  # used again: listens, and asks for one more claim at once
    assert lazy.waker.started and lazy.listening(lazy.waker.listener_pid)
    assert not lazy.waker.wait(0.2)
    lazy.ping.enqueue()
    assert lazy.waker.wait(10.0)


def test_a_closed_lazy_waker_never_starts(lazy: Lazy) -> None:
    lazy.waker.close()
    began = time.monotonic()
    assert lazy.waker.wait(1.0)  # a closed waker returns at once (its event is set)
    assert not lazy.waker.started and time.monotonic() - began < 0.5


@pytest.mark.parametrize("user_options", ["", "-cstatement_timeout=60000 -cwork_mem=8MB"])
def test_a_waker_listens_whatever_options_the_ledger_url_carries(user_options: str) -> None:
    """The listening connection takes the engine's own connect arguments. Rendered back to a
    URL, the spaces of several ``options`` read as "+" to libpq, the server refused the
    connection, and idle workers only polled. The tests' ledgers hid it: their first option,
    ``search_path``, accepts any text and swallowed the others."""
    query = f"?options={urllib.parse.quote(user_options)}" if user_options else ""
    engine = create_engine(POSTGRES_URL + query)  # adds options of its own
    queue = f"plain-{secrets.token_hex(4)}"
    waker = PgNotifyWaker(engine, {queue})  # eager: listening when constructed
    try:
        assert waker.listener_pid is not None
        with engine.begin() as conn:
            conn.execute(
                sa.text("SELECT pg_notify(:channel, :queue)"),
                {"channel": NOTIFY_CHANNEL, "queue": queue},
            )
        assert waker.wait(10.0)
    finally:
        waker.close()
        engine.dispose()
