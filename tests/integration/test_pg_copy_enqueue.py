"""PostgreSQL's bulk enqueue through COPY (``store/postgres/copy_insert.py``): a batch of
``COPY_MIN_ROWS`` or more plain jobs keeps every promise of the one-statement insert: ids in
the batch's order, payloads byte for byte, states and due times, rows committed before the
call returns, idle workers woken; keyed and deduplicated jobs keep their own paths."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.store.engine import create_engine
from ledgerq.store.postgres.copy_insert import COPY_MIN_ROWS
from ledgerq.store.tables import jobs
from tests.helpers import running_worker, wait_until

S = JobState
# Characters COPY's text format escapes, and some it does not.
AWKWARD = ["tab\there", "new\nline", "back\\slash", "cr\rhere", "\\N", "é ü 日本", 'q"uote']


@pytest.fixture
def app(make_database_url: Callable[[str], str]) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=make_database_url("postgresql"))
    yield application
    application.close()


def rows_of(url: str, ids: list[int]) -> list[sa.Row[tuple[object, ...]]]:
    """The jobs as a session of its own sees them: only committed rows."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            query = sa.select(jobs).where(jobs.c.id.in_(ids)).order_by(jobs.c.id)
            return list(conn.execute(query).all())
    finally:
        engine.dispose()


def test_a_large_batch_is_copied_in_order_and_committed(app: LedgerQ) -> None:
    @app.task(queue="copy", max_attempts=2)
    def send(ctx: JobContext, text: str, n: int) -> None: ...

    calls = [(AWKWARD[n % len(AWKWARD)], n) for n in range(COPY_MIN_ROWS + 50)]
    built = [app.client.build(send.spec, call, timeout=7.5) for call in calls]
    ids = [h.job_id for h in app.client.enqueue(built)]
    assert ids == sorted(ids) and len(set(ids)) == len(calls)
    url = app.settings.database_url.get_secret_value()
    rows = rows_of(url, ids)  # another session: committed when enqueue_many returned
    assert [r.id for r in rows] == ids
    decoded = [app.parts.codec.decode_args(r.args)[0] for r in rows]
    assert decoded == [list(call) for call in calls]
    assert {(r.queue, r.task, r.state, r.max_attempts, r.timeout_seconds) for r in rows} == {
        ("copy", send.name, "queued", 2, 7.5)
    }
    # One clock read per batch: what tells the COPY path from the per-row insert's clock.
    assert len({r.created_at for r in rows}) == 1
    assert all(r.run_at == r.created_at and r.attempt == 0 for r in rows)


def test_delayed_and_held_jobs_keep_their_states(app: LedgerQ) -> None:
    @app.task()
    def later(ctx: JobContext, n: int) -> None: ...

    delayed = [h.job_id for h in later.enqueue_many([(n,) for n in range(COPY_MIN_ROWS)], delay=90)]
    held_jobs = [app.client.build(later.spec, (n,), held=True) for n in range(COPY_MIN_ROWS)]
    held = [h.job_id for h in app.client.enqueue(held_jobs)]
    url = app.settings.database_url.get_secret_value()
    for row in rows_of(url, delayed):
        assert row.state == "scheduled"
        assert abs((row.run_at - row.created_at).total_seconds() - 90) < 0.001
    assert {r.state for r in rows_of(url, held)} == {"held"}


def test_keyed_and_deduplicated_batches_keep_their_paths(app: LedgerQ) -> None:
    @app.task()
    def report(ctx: JobContext, n: int) -> None: ...

    count = COPY_MIN_ROWS + 10
    keys = [f"k{n % 50}" for n in range(count)]  # each key five or six times
    results = report.enqueue_many([(n,) for n in range(count)], dedupe_keys=keys)
    assert sum(not r.duplicate for r in results) == 50
    assert len(app.jobs.list(limit=1000)) == 50


def test_an_idle_worker_is_woken_by_a_copied_batch(app: LedgerQ) -> None:
    ran: list[int] = []
    lock = threading.Lock()

    @app.task(queue="woken")
    def ping(ctx: JobContext, n: int) -> None:
        with lock:
            ran.append(n)

    # A 60 s poll interval: only the batch's NOTIFY can explain a prompt start.
    with running_worker(app, queues=["woken"], poll_interval_seconds=60.0):
        ping.enqueue(-1)  # once this ran, the worker is idle and listening
        wait_until(lambda: ran == [-1], timeout=10, what="warm-up job")
        ping.enqueue_many([(n,) for n in range(COPY_MIN_ROWS)])
        wait_until(lambda: len(ran) == COPY_MIN_ROWS + 1, timeout=10, what="the batch run")
