"""The redis driver in process, against real databases and a private Redis: ids reach Redis
only after the rows commit (also inside the caller's transaction), workers run what Redis
announces, and the reconciler deletes expired jobs with their folders."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ
from ledgerq.runtime.reconciler import ReconcilePolicy, Reconciler
from ledgerq.store.tables import jobs
from ledgerq.transport.redis import RedisTransport
from tests.helpers import running_worker, wait_until
from tests.redis_server import RedisServer


@pytest.fixture
def app(database_url: str, redis_server: RedisServer) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, redis_url=redis_server.url, namespace="it")
    ran: list[int] = []
    lock = threading.Lock()

    @application.task(name="work")
    def work(ctx: JobContext, n: int) -> int:
        with lock:
            ran.append(n)
        return n

    application.ran = ran  # type: ignore[attr-defined]
    yield application
    application.close()


def hinted(server: RedisServer, app: LedgerQ, queue: str = "default") -> list[int]:
    """The ids in ``queue``'s set once ``app``'s producer sent every hint it has."""
    assert app.client.flush_hints(10)
    with server.client() as raw:
        return [int(m) for m in raw.zrange(f"it:0:queue:{queue}", 0, -1)]


def test_ids_are_announced_after_commit_and_never_on_rollback(
    app: LedgerQ, redis_server: RedisServer
) -> None:
    first = app.client.enqueue([app.client.build("work", (1,))])[0].job_id
    assert hinted(redis_server, app) == [first]

    with app.parts.store.engine.connect() as conn:
        with app.transaction(conn) as tx:
            inside = app.client.enqueue([app.client.build("work", (2,))], tx=tx)[0].job_id
            # Not committed yet: workers must not hear of it.
            assert hinted(redis_server, app) == [first]
        assert hinted(redis_server, app) == [first, inside]
        trans = conn.begin()
        app.client.enqueue([app.client.build("work", (3,))], tx=conn)
        trans.rollback()
    assert hinted(redis_server, app) == [first, inside]
    # Delayed jobs are announced when they become due, not before.
    app.client.enqueue([app.client.build("work", (4,), delay=3600)])
    assert hinted(redis_server, app) == [first, inside]


def test_a_redis_worker_runs_what_redis_announces(app: LedgerQ, redis_server: RedisServer) -> None:
    app.client.enqueue([app.client.build("work", (n,)) for n in range(50)])
    with running_worker(app, concurrency=4, poll_interval_seconds=5.0, reconcile=False) as worker:
        wait_until(lambda: len(app.ran) == 50, timeout=30, what="50 jobs run")  # type: ignore[attr-defined]
        assert isinstance(worker._transport, RedisTransport)
        assert worker._transport.carries_ids()
    assert sorted(app.ran) == list(range(50))  # type: ignore[attr-defined]
    assert hinted(redis_server, app) == []


def test_an_id_announced_before_its_commit_is_claimed_soon_after(
    app: LedgerQ, redis_server: RedisServer
) -> None:
    """SQLAlchemy's commit event, which announces a transaction's jobs, fires just before the
    commit: a worker may pop the id while the row is still invisible and drop it. It looks
    again by query shortly after, instead of leaving the job to the reconciler."""
    sqlite = app.parts.store.dialect.name == "sqlite"  # its claim waits for the write lock
    app.client.enqueue([app.client.build("work", (0,))])
    with running_worker(app, concurrency=2, poll_interval_seconds=60.0, reconcile=False) as worker:

        def wait_for_drop() -> None:
            if not sqlite:
                wait_until(lambda: worker._fetcher.dropped_hints > 0, timeout=10, what="drop")

        wait_until(lambda: app.ran == [0], timeout=30, what="warm-up job")  # type: ignore[attr-defined]
        with app.parts.store.engine.connect() as conn, app.transaction(conn) as tx:
            app.client.enqueue([app.client.build("work", (1,))], tx=tx)
            # Registered after the enqueue's announcement, so the commit comes only once
            # the worker has popped the id and failed to claim the invisible row.
            sa.event.listen(conn, "commit", lambda _conn: wait_for_drop(), once=True)
        # Without the look-again the job would wait for the 60 s poll or the reconciler.
        wait_until(lambda: 1 in app.ran, timeout=5, what="the late-committed job ran")  # type: ignore[attr-defined]
    assert sqlite or worker._fetcher.dropped_hints == 1


def test_reconciler_deletes_expired_and_retained_jobs_with_their_folders(
    app: LedgerQ, tmp_path: Path
) -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    expired = app.client.enqueue([app.client.build("work", (1,), held=True, expires_at=past)])
    kept = app.client.enqueue([app.client.build("work", (2,), held=True)])
    expired_id, kept_id = expired[0].job_id, kept[0].job_id
    for job_id in (expired_id, kept_id):
        (tmp_path / str(job_id)).mkdir()
        (tmp_path / str(job_id) / "input.csv").write_text("a,b\n")
    policy = ReconcilePolicy(artifact_root=tmp_path, requeue_after_seconds=3600)
    transport = RedisTransport(app.settings.redis_url.get_secret_value(), namespace="it")  # type: ignore[union-attr]
    try:
        report = Reconciler(app.parts.repair, app.parts.store, transport, policy).run_once()
    finally:
        transport.close()
    assert (report.ran, report.deleted_expired, report.folders_removed) == (True, 1, 1)
    assert not (tmp_path / str(expired_id)).exists()
    assert (tmp_path / str(kept_id) / "input.csv").exists()
    with app.parts.store.engine.connect() as conn:
        left = set(conn.execute(sa.select(jobs.c.id)).scalars())
    assert left == {kept_id}


def test_health_checks_record_the_redis_round_trip(app: LedgerQ) -> None:
    with running_worker(app, concurrency=1, health_check_interval_seconds=0.2) as worker:

        def transport_latency() -> float | None:
            checks = app.parts.fleet.latest_health_checks([worker.id])
            record = checks.get(worker.id)
            return record.check.transport_latency_ms if record is not None else None

        latency = wait_until(transport_latency, timeout=15, what="a health check with Redis")
    assert 0 < latency < 1000


def test_jobs_put_back_by_a_failover_are_announced(app: LedgerQ, redis_server: RedisServer) -> None:
    from ledgerq.core.fleet import Registration

    # A worker that claimed a job and died: registered once, never heartbeating again.
    app.parts.fleet.register_worker(Registration("ghost:1:a", "ghost", 1, ("default",), 1, "t"))
    [held] = app.client.enqueue([app.client.build("work", (7,))])
    with redis_server.client() as raw:
        raw.delete("it:0:queue:default")  # the ghost had popped its id
    [claimed] = app.parts.store.claim_jobs(
        queues=["default"], worker_id="ghost:1:a", limit=1, lease_seconds=1
    )
    assert claimed.id == held.job_id
    # A 60 s poll interval: without the announcement the survivor would see the job only
    # when its idle pull gives up (or the reconciler re-sends it), far beyond this deadline.
    with running_worker(
        app,
        concurrency=1,
        poll_interval_seconds=60.0,
        heartbeat_interval_seconds=0.2,
        lease_seconds=1.0,
        failover_check_interval_seconds=0.2,
        reconcile=False,
    ):
        wait_until(lambda: app.ran == [7], timeout=10, what="the failed-over job ran")  # type: ignore[attr-defined]
    job = app.client.get(held.job_id)
    assert (job.state.value, job.attempt) == ("succeeded", 2)
