"""PostgreSQL's one-job enqueue (``INSERT_ONE_NOTIFY``: the job as bind parameters, not a JSON
document) stores the same row the batch insert stores, and wakes idle workers the same way."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ
from ledgerq.store.tables import jobs
from tests.helpers import running_worker, wait_until

#: The columns a new job's enqueue decides (ids and clock readings aside).
DECIDED = ("queue", "task", "args", "priority", "state", "max_attempts", "timeout_seconds")


@pytest.fixture
def app(make_database_url: Callable[[str], str]) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=make_database_url("postgresql"))
    yield application
    application.close()


def _rows(app: LedgerQ, ids: list[int]) -> list[sa.Row[tuple[object, ...]]]:
    with app.engine.connect() as conn:
        query = sa.select(jobs).where(jobs.c.id.in_(ids)).order_by(jobs.c.id)
        return list(conn.execute(query).all())


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"delay": 45.5, "priority": 7, "timeout": 2.5},
        {"held": True, "max_attempts": 9},
    ],
)
def test_one_job_is_stored_as_the_batch_insert_stores_it(
    app: LedgerQ, options: dict[str, object]
) -> None:
    @app.task(queue="single")
    def send(ctx: JobContext, text: str, n: int) -> None: ...

    awkward = "tab\there, quote ' and é 日本"
    one = app.client.enqueue([app.client.build(send.spec, (awkward, 1), **options)])
    pair = app.client.enqueue([app.client.build(send.spec, (awkward, 1), **options)] * 2)
    single, batched, _ = _rows(app, [one[0].job_id, pair[0].job_id, pair[1].job_id])
    assert [getattr(single, c) for c in DECIDED] == [getattr(batched, c) for c in DECIDED]
    assert app.parts.codec.decode_args(single.args)[0] == [awkward, 1]
    delay = float(options.get("delay", 0.0))  # type: ignore[arg-type]
    assert abs((single.run_at - single.created_at).total_seconds() - delay) < 0.001


def test_an_idle_worker_is_woken_by_one_job(app: LedgerQ) -> None:
    ran: list[int] = []
    lock = threading.Lock()

    @app.task(queue="woken-one")
    def ping(ctx: JobContext, n: int) -> None:
        with lock:
            ran.append(n)

    # A 60 s poll interval: only the enqueue's NOTIFY can explain a prompt start.
    with running_worker(app, queues=["woken-one"], poll_interval_seconds=60.0):
        ping.enqueue(0)
        wait_until(lambda: ran == [0], timeout=10, what="warm-up job")
        for n in range(1, 4):
            ping.enqueue(n)
            wait_until(lambda n=n: len(ran) == n + 1, timeout=10, what=f"job {n}")
