"""Claims by transport hint and the reconciler's repairs (the LedgerRepair port), against
SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from ledgerq.core.job import Claim, Job, JobHint, NewJob, as_utc
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.repair import SqlLedgerRepair
from ledgerq.store.tables import idempotency_keys, job_assignments, jobs
from tests.conftest import engine_for
from tests.helpers import wait_until

S = JobState


@pytest.fixture
def store(engine: sa.Engine) -> SqlJobStore:
    return SqlJobStore(engine)


@pytest.fixture
def repair(engine: sa.Engine) -> SqlLedgerRepair:
    return SqlLedgerRepair(engine)


def new(queue: str = "q", **kw: object) -> NewJob:
    return NewJob(task="t", queue=queue, args_json='{"args":[],"kwargs":{}}', **kw)  # type: ignore[arg-type]


def ids_of(store: SqlJobStore, *jobs_: NewJob) -> list[int]:
    return [r.job_id for r in store.insert_jobs(list(jobs_))]


def age(engine: sa.Engine, job_id: int, **columns: float) -> None:
    """Move timestamps of a job ``seconds`` into the past (column=seconds)."""
    values = {
        name: datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=seconds)
        for name, seconds in columns.items()
    }
    with engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(values))


def test_claim_by_hint_takes_only_queued_jobs_of_its_queues(store: SqlJobStore) -> None:
    mine, other_queue, finished, later = ids_of(
        store, new(), new(queue="other"), new(), new(delay_seconds=60)
    )
    [done] = store.claim_jobs(
        queues=["q"], worker_id="w0", limit=1, lease_seconds=30, job_ids=[finished]
    )
    store.complete_jobs([Completion(Claim(done.id, done.attempt), S.SUCCEEDED)])
    hinted = [mine, other_queue, finished, later, 999_999_999, mine]
    claimed = store.claim_jobs(
        queues=["q"], worker_id="w1", limit=len(hinted), lease_seconds=30, job_ids=hinted
    )
    assert [j.id for j in claimed] == [mine]
    assert claimed[0].state is S.RUNNING and claimed[0].attempt == 1
    # A second claim of the same hint fails on the state.
    again = store.claim_jobs(
        queues=["q"], worker_id="w2", limit=5, lease_seconds=30, job_ids=[mine]
    )
    assert again == []
    assert (
        store.claim_jobs(queues=["q"], worker_id="w2", limit=5, lease_seconds=30, job_ids=[]) == []
    )


def test_racing_claims_of_the_same_hints_give_each_job_once(store: SqlJobStore) -> None:
    ids = ids_of(store, *(new() for _ in range(40)))
    won: list[int] = []
    lock = threading.Lock()

    def claim(worker: str) -> None:
        for _ in range(5):  # every id offered to every claimer, five times
            got = store.claim_jobs(
                queues=["q"], worker_id=worker, limit=len(ids), lease_seconds=30, job_ids=ids
            )
            with lock:
                won.extend(j.id for j in got)

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(won) == sorted(ids)


def test_stuck_jobs_go_back_fenced_and_spent_ones_die(
    store: SqlJobStore, repair: SqlLedgerRepair, engine: sa.Engine
) -> None:
    silent, spent, alive = ids_of(store, new(), new(max_attempts=1), new())
    claims = {
        j.id: j for j in store.claim_jobs(queues=["q"], worker_id="w", limit=3, lease_seconds=30)
    }
    age(engine, silent, heartbeat_at=120, claimed_at=120)
    age(engine, spent, heartbeat_at=120, claimed_at=120)
    age(engine, alive, heartbeat_at=120, claimed_at=120, progress_at=1)  # still progressing
    reset = repair.reset_stuck_jobs(stuck_after_seconds=60, limit=100)
    assert reset.requeued == [JobHint(silent, "q", 0)]
    assert reset.dead == [spent]
    back, dead = store.get_job(silent), store.get_job(spent)
    began = {silent: back.claimed_at, spent: dead.claimed_at}
    assert back.state is S.QUEUED and back.attempt == 1 and back.worker_id is None
    assert dead.state is S.DEAD and '"stuck"' in (dead.error_json or "")
    # The lost owner's late completion is refused; the job runs again with a new attempt.
    lost = claims[silent]
    assert store.complete_jobs([Completion(Claim(lost.id, lost.attempt), S.SUCCEEDED)]) == [False]
    [again] = store.claim_jobs(queues=["q"], worker_id="w2", limit=1, lease_seconds=30)
    assert (again.id, again.attempt) == (silent, 2)
    # The history holds the two ended attempts, with their holder and start; the attempt that
    # still progresses has no end.
    a = job_assignments
    with engine.connect() as conn:
        rows = conn.execute(sa.select(a.c.job_id, a.c.worker_id, a.c.started_at, a.c.outcome))
        history = {r.job_id: r for r in rows}
    assert {j: r.outcome for j, r in history.items() if r.outcome} == {
        silent: "orphaned",
        spent: "orphaned",
    }
    for job_id in (silent, spent):
        assert history[job_id].worker_id == "w"
        assert as_utc(history[job_id].started_at) == began[job_id]


def _watch_while_beating(
    store: SqlJobStore, repair: SqlLedgerRepair, job: Job, stuck_after: float, seconds: float
) -> tuple[bool, float]:
    """Reset stuck jobs every 50 ms for ``seconds`` while ``job``'s owner beats every 50 ms;
    return whether a reset took the job, and the longest gap between the owner's beats."""
    stop = threading.Event()
    beats: list[float] = [time.monotonic()]

    def beat() -> None:
        while not stop.is_set():
            store.heartbeat_jobs([Claim(job.id, job.attempt)], lease_seconds=30)
            beats.append(time.monotonic())
            stop.wait(0.05)

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    reset = False
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not reset:
            reset = bool(
                repair.reset_stuck_jobs(stuck_after_seconds=stuck_after, limit=10).requeued
            )
            time.sleep(0.05)
    finally:
        stop.set()
        beater.join(5)
    beats.append(time.monotonic())
    return reset, max(b - a for a, b in itertools.pairwise(beats))


def test_stuck_reset_refuses_a_job_whose_owner_heartbeats(
    store: SqlJobStore, repair: SqlLedgerRepair
) -> None:
    """The owner heartbeats every 50 ms; the reconciler looks for 1 s of silence and never
    finds it. A loaded machine can stall the owner's thread or the database for longer (a
    2.4 s MariaDB stall was seen): a reset after such a gap is right, so the watch starts again
    with the job claimed anew; a reset without one fails the test."""
    [job_id] = ids_of(store, new())
    stuck_after = 1.0
    for _ in range(3):
        [job] = store.claim_jobs(queues=["q"], worker_id="w", limit=1, lease_seconds=30)
        assert job.id == job_id
        reset, longest_gap = _watch_while_beating(store, repair, job, stuck_after, seconds=2.5)
        if not reset:
            break
        assert longest_gap >= stuck_after / 2, f"reset after a gap of only {longest_gap:.2f} s"
    else:
        pytest.fail("the machine stalled the heartbeats in every round")
    assert store.get_job(job_id).state is S.RUNNING
    # Once it goes silent, the same call takes the job back.
    wait_until(
        lambda: repair.reset_stuck_jobs(stuck_after_seconds=0.3, limit=10).requeued,
        timeout=10,
        what="silent job reset",
    )
    assert store.get_job(job_id).state is S.QUEUED


def test_queued_hints_are_the_jobs_waiting_longer_than_asked(
    store: SqlJobStore, repair: SqlLedgerRepair, engine: sa.Engine
) -> None:
    old, fresh, old_low = ids_of(store, new(priority=3), new(), new(queue="x", priority=-2))
    age(engine, old, run_at=120)
    age(engine, old_low, run_at=90)
    assert repair.queued_hints(waiting_seconds=60, limit=10) == [
        JobHint(old_low, "x", -2),
        JobHint(old, "q", 3),
    ]
    assert repair.queued_hints(waiting_seconds=60, limit=1) == [JobHint(old_low, "x", -2)]
    assert fresh in {h.job_id for h in repair.queued_hints(waiting_seconds=0, limit=10)}


def test_purge_deletes_by_retention_and_expiry_only(
    store: SqlJobStore, repair: SqlLedgerRepair, engine: sa.Engine
) -> None:
    expired_at = datetime.now(UTC) - timedelta(seconds=5)
    kept_until = datetime.now(UTC) + timedelta(hours=1)
    ok_old, ok_new, dead_old, waiting, expired, not_yet = ids_of(
        store,
        new(),
        new(),
        new(max_attempts=1),
        new(),
        new(expires_at=expired_at),
        new(expires_at=kept_until),
    )
    for job in store.claim_jobs(
        queues=["q"], worker_id="w", limit=3, lease_seconds=30, job_ids=[ok_old, ok_new, dead_old]
    ):
        state = S.DEAD if job.id == dead_old else S.SUCCEEDED
        store.complete_jobs([Completion(Claim(job.id, job.attempt), state)])
    age(engine, ok_old, finished_at=7200)
    age(engine, dead_old, finished_at=7200)
    age(engine, waiting, run_at=7200, created_at=7200)
    now = datetime.now(UTC).replace(tzinfo=None)
    with engine.begin() as conn:  # Idempotency-Keys of the HTTP API point at jobs
        for key, job_id in (("k-old", ok_old), ("k-new", ok_new)):
            row = {"key": key, "job_id": job_id, "request_hash": "h", "created_at": now}
            conn.execute(sa.insert(idempotency_keys).values(row))
    purge = repair.purge_jobs(succeeded_after_seconds=3600, failed_after_seconds=3600, limit=100)
    assert (purge.succeeded, purge.failed, purge.expired) == ([ok_old], [dead_old], [expired])
    with engine.connect() as conn:
        left = set(conn.execute(sa.select(jobs.c.id)).scalars())
        keys = set(conn.execute(sa.select(idempotency_keys.c.key)).scalars())
    assert left == {ok_new, waiting, not_yet}
    assert keys == {"k-new"}  # a key goes with its job


def test_exclusive_lock_admits_one_holder_at_a_time(
    repair: SqlLedgerRepair, engine: sa.Engine, backend: str
) -> None:
    other = SqlLedgerRepair(engine)
    with repair.exclusive("reconcile-test") as first:
        assert first
        with other.exclusive("reconcile-test") as second:
            # SQLite is one host and every repair is safe to repeat: no lock is needed there.
            assert second is (backend == "sqlite")
        with other.exclusive("another-name") as unrelated:
            assert unrelated
    with other.exclusive("reconcile-test") as after:
        assert after


def test_exclusive_locks_of_two_ledgers_in_one_server_are_their_own(
    backend: str, make_database_url: Callable[[str], str]
) -> None:
    """PostgreSQL advisory locks and MySQL user locks are server- or database-wide: two
    ledgers (a schema, or a database, each) must not hold each other's reconciler lock."""
    if backend == "sqlite":
        pytest.skip("SQLite takes no lock (one host, every repair safe to repeat)")
    engines = [engine_for(make_database_url(backend)) for _ in range(2)]
    try:
        first, second = (SqlLedgerRepair(made) for made in engines)
        with first.exclusive("reconcile-test") as held_here:
            with second.exclusive("reconcile-test") as held_there:
                assert held_here and held_there
            with SqlLedgerRepair(engines[0]).exclusive("reconcile-test") as again_here:
                assert not again_here
    finally:
        for made in engines:
            made.dispose()


def test_purge_of_dedupe_windows_deletes_only_expired_ones(
    store: SqlJobStore, repair: SqlLedgerRepair, engine: sa.Engine
) -> None:
    from ledgerq.store.tables import job_dedupe_windows as windows

    held = store.insert_jobs([new(dedupe_key="open", dedupe_for_seconds=3600)])[0]
    now = datetime.now(UTC).replace(tzinfo=None)
    with engine.begin() as conn:  # windows whose time is over (their jobs are long gone)
        for key, seconds in (("old-1", 60), ("old-2", 1)):
            row = {
                "dedupe_key": key,
                "job_id": None,
                "expires_at": now - timedelta(seconds=seconds),
            }
            conn.execute(sa.insert(windows).values(row))
    assert repair.purge_dedupe_windows(limit=1) == 1  # the limit holds
    assert repair.purge_dedupe_windows(limit=100) == 1
    assert repair.purge_dedupe_windows(limit=100) == 0
    with engine.connect() as conn:
        assert set(conn.execute(sa.select(windows.c.dedupe_key)).scalars()) == {"open"}
    # A purged key is free for a new window; the open one still deduplicates.
    fresh = store.insert_jobs([new(dedupe_key="old-1", dedupe_for_seconds=60)])[0]
    again = store.insert_jobs([new(dedupe_key="open", dedupe_for_seconds=60)])[0]
    assert not fresh.duplicate
    assert again.duplicate and again.job_id == held.job_id
