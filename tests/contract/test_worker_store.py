"""The WorkerStore contract (and the operator side, SqlFleetAdmin): the same suite against
SQLite, PostgreSQL and MariaDB. Times are the database's; TTLs are short so tests stay fast."""

from __future__ import annotations

import dataclasses
import json

import pytest
import sqlalchemy as sa

from ledgerq.core import fleet, unknown_tasks
from ledgerq.core.job import Claim, Job, NewJob, as_utc
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.jobs import SqlJobStore
from tests.helpers import wait_until

S = JobState
W = fleet.WorkerState
PULSE = fleet.Pulse(jobs_in_flight=1, jobs_processed=5, last_fetch_age_seconds=0.5)


@pytest.fixture
def stores(engine: sa.Engine) -> tuple[SqlJobStore, SqlFleetAdmin]:
    return SqlJobStore(engine), SqlFleetAdmin(engine)


def register(fleet_store: SqlFleetAdmin, worker_id: str, queues: tuple[str, ...] = ("q",)) -> None:
    fleet_store.register_worker(
        fleet.Registration(worker_id, "host-a", 1234, queues, concurrency=4, version="0.1.0")
    )


def new(queue: str = "q", max_attempts: int = 3) -> NewJob:
    return NewJob(task="t", queue=queue, args_json="[]", max_attempts=max_attempts)


def test_register_heartbeat_and_deregister(stores: tuple[SqlJobStore, SqlFleetAdmin]) -> None:
    _, ws = stores
    register(ws, "h:1:a")
    (worker,) = ws.list_workers()
    assert (worker.worker_id, worker.state, worker.queues, worker.pid) == (
        "h:1:a",
        W.ACTIVE,
        ("q",),
        1234,
    )
    assert worker.heartbeat_age_seconds < 5
    reply = ws.heartbeat_worker("h:1:a", PULSE)
    assert reply == fleet.HeartbeatReply(stop_requested=None)
    (worker,) = ws.list_workers()
    assert (worker.jobs_in_flight, worker.jobs_processed) == (1, 5)
    assert worker.last_fetch_age_seconds is not None and worker.last_fetch_age_seconds < 5
    assert ws.heartbeat_worker("nobody", PULSE) is None
    assert ws.deregister_worker("h:1:a") is True
    assert ws.deregister_worker("h:1:a") is False
    assert ws.list_workers() == []
    (stopped,) = ws.list_workers(include_inactive=True)
    assert stopped.state is W.STOPPED and stopped.stopped_at is not None
    # A stopped worker's heartbeat is refused; registering again makes it active.
    assert ws.heartbeat_worker("h:1:a", PULSE) is None
    register(ws, "h:1:a")
    assert ws.heartbeat_worker("h:1:a", PULSE) is not None


def test_stop_requests_travel_through_the_heartbeat(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    _, ws = stores
    for name in ("a", "b", "c"):
        register(ws, name)
    assert ws.request_stop(worker_id="b", mode=fleet.StopMode.GRACEFUL) == 1
    assert ws.request_stop(worker_id="nobody", mode=fleet.StopMode.GRACEFUL) == 0
    assert ws.heartbeat_worker("a", PULSE).stop_requested is None  # type: ignore[union-attr]
    reply = ws.heartbeat_worker("b", PULSE)
    assert reply is not None and reply.stop_requested is fleet.StopMode.GRACEFUL
    assert ws.request_stop(worker_id=None, mode=fleet.StopMode.IMMEDIATE) == 3
    replies = [ws.heartbeat_worker(n, PULSE) for n in "abc"]
    assert {r.stop_requested for r in replies if r} == {fleet.StopMode.IMMEDIATE}


def test_read_stop_request_reads_only_the_database(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    _, ws = stores
    for name in ("a", "b"):
        register(ws, name)
    assert ws.read_stop_request("a") is None
    assert ws.read_stop_request("nobody") is None
    ws.request_stop(worker_id="a", mode=fleet.StopMode.GRACEFUL)
    assert ws.read_stop_request("a") is fleet.StopMode.GRACEFUL
    assert ws.read_stop_request("b") is None
    ws.request_stop(worker_id=None, mode=fleet.StopMode.IMMEDIATE)
    assert ws.read_stop_request("b") is fleet.StopMode.IMMEDIATE
    # A stopped worker has nothing left to obey; registering again clears the request.
    ws.deregister_worker("b")
    assert ws.read_stop_request("b") is None
    register(ws, "b")
    assert ws.read_stop_request("b") is None


def test_heartbeat_reply_carries_the_peers_mean_rate(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    _, ws = stores
    register(ws, "solo", queues=("other",))
    register(ws, "a")
    register(ws, "b")

    def beat(name: str, rate: float) -> fleet.HeartbeatReply | None:
        return ws.heartbeat_worker(name, fleet.Pulse(0, 0, None, jobs_per_second=rate))

    assert beat("solo", 5.0) == fleet.HeartbeatReply(None, None)  # alone on its queues
    beat("a", 10.0)
    reply = beat("b", 30.0)
    # Per slot (both have 4): (10 / 4 + 30 / 4) / 2.
    assert reply is not None and reply.peers_jobs_per_second_per_slot == pytest.approx(5.0)


def test_failover_requeues_a_stale_workers_jobs_fenced_and_records_the_event(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    js, ws = stores
    register(ws, "dying")
    register(ws, "alive")
    ids = [r.job_id for r in js.insert_jobs([new(), new(), new(max_attempts=1), new()])]
    held = js.claim_jobs(queues=["q"], worker_id="dying", limit=3, lease_seconds=60)
    js.claim_jobs(queues=["q"], worker_id="alive", limit=1, lease_seconds=60)
    # The last attempt's start never reached the history (as where completions write it).
    ws.record_assignments(
        [fleet.AssignmentEvent(j.id, j.attempt, "dying", j.claimed_at) for j in held[:2]]
    )
    # Nothing is stale yet.
    assert ws.fail_over_workers(ttl_seconds=30, detected_by="test") == []

    def stale() -> list[fleet.FailoverEvent]:
        ws.heartbeat_worker("alive", PULSE)
        return ws.fail_over_workers(ttl_seconds=1.0, detected_by="test")

    (event,) = wait_until(stale, timeout=10, what="the stale worker failed over")
    assert event.worker_id == "dying" and event.detected_by == "test"
    exhausted = {j.id for j in held if j.max_attempts == 1}
    assert set(event.dead) == exhausted
    assert set(event.requeued) == {j.id for j in held} - exhausted
    for job in held:
        after = js.get_job(job.id)
        assert after.state is (S.DEAD if job.id in exhausted else S.QUEUED)
        assert after.attempt == 1 and after.worker_id in (None, "dying")
    # The dead worker's writes are refused: heartbeat, job heartbeat, completion.
    assert ws.heartbeat_worker("dying", PULSE) is None
    claims = [Claim(j.id, j.attempt) for j in held]
    assert js.heartbeat_jobs(claims, lease_seconds=60) == [False] * 3
    assert js.complete_jobs([Completion(c, S.SUCCEEDED) for c in claims]) == [False] * 3
    # History: each held attempt closed as failed over; one event row.
    history = {(r["job_id"], r["attempt"]): r for r in ws.list_assignments()}
    assert {history[(c.job_id, 1)]["outcome"] for c in claims} == {"failed_over"}
    assert all(history[(c.job_id, 1)]["ended_at"] is not None for c in claims)
    # Each row keeps its holder and the claim's start, recorded before or not.
    for job in held:
        row = history[(job.id, 1)]
        assert row["worker_id"] == "dying" and as_utc(row["started_at"]) == job.claimed_at
    (row,) = ws.list_failover_events()
    assert ws.count_failover_events() == 1
    assert row["worker_id"] == "dying" and row["jobs_requeued"] == 2 and row["jobs_dead"] == 1
    assert sorted(row["job_ids"]["requeued"]) == sorted(event.requeued)
    (dead_worker,) = [w for w in ws.list_workers(include_inactive=True) if w.worker_id == "dying"]
    assert dead_worker.state is W.DEAD
    # The live worker was not touched, and its job still runs.
    assert [w.worker_id for w in ws.list_workers()] == ["alive"]
    assert js.get_job(ids[3]).state is S.RUNNING
    # A second failover finds nothing to do: the dead worker, stale by age, is not failed
    # over twice. The live one beats first, so a loaded machine cannot age it past the TTL.
    ws.heartbeat_worker("alive", PULSE)
    assert ws.fail_over_workers(ttl_seconds=1.0, detected_by="again") == []
    # The requeued jobs are claimable again, as a new attempt.
    again = js.claim_jobs(queues=["q"], worker_id="alive", limit=5, lease_seconds=60)
    assert {j.id for j in again} == set(event.requeued) and {j.attempt for j in again} == {2}


def test_a_process_its_supervisor_saw_die_is_failed_over_at_once(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    js, ws = stores
    for worker_id, pid in (("crashed", 41), ("sibling", 42)):
        ws.register_worker(
            fleet.Registration(worker_id, "host-m", pid, ("q",), concurrency=4, version="0.1.0")
        )
    ids = [r.job_id for r in js.insert_jobs([new(), new(), new()])]
    held = js.claim_jobs(queues=["q"], worker_id="crashed", limit=2, lease_seconds=60)
    js.claim_jobs(queues=["q"], worker_id="sibling", limit=1, lease_seconds=60)
    # Another host's pid 41, and a pid with no worker, are nobody's business here.
    assert ws.fail_over_process(hostname="host-x", pid=41, detected_by="m") == []
    assert ws.fail_over_process(hostname="host-m", pid=43, detected_by="m") == []
    # Its heartbeat is fresh: no TTL is waited for.
    (event,) = ws.fail_over_process(
        hostname="host-m", pid=41, detected_by="manager h:1: child 41 killed by SIGKILL"
    )
    assert event.worker_id == "crashed" and set(event.requeued) == {j.id for j in held}
    assert all(js.get_job(j.id).state is S.QUEUED for j in held)
    (row,) = ws.list_failover_events()
    assert row["detected_by"] == "manager h:1: child 41 killed by SIGKILL"
    # Fenced: the crashed attempts' late writes are refused; the sibling is untouched.
    claims = [Claim(j.id, j.attempt) for j in held]
    assert js.complete_jobs([Completion(c, S.SUCCEEDED) for c in claims]) == [False] * 2
    assert [w.worker_id for w in ws.list_workers()] == ["sibling"]
    (other,) = set(ids) - {j.id for j in held}
    assert js.get_job(other).state is S.RUNNING
    # Once failed over, a second report (or the lifeline) moves nothing again.
    assert ws.fail_over_process(hostname="host-m", pid=41, detected_by="m") == []
    assert ws.fail_over_workers(ttl_seconds=3600, detected_by="t") == []


def test_orphaned_running_jobs_are_rescued_after_their_lease(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    js, ws = stores
    (job_id,) = [r.job_id for r in js.insert_jobs([new()])]
    (other,) = [r.job_id for r in js.insert_jobs([new()])]
    js.claim_jobs(queues=["q"], worker_id="never-registered", limit=1, lease_seconds=0.2)
    js.claim_jobs(queues=["q"], worker_id="also-unregistered", limit=1, lease_seconds=600)
    (event,) = wait_until(
        lambda: ws.fail_over_workers(ttl_seconds=30, detected_by="t"), what="orphan rescued"
    )
    assert event.requeued == (job_id,) and event.worker_id == "never-registered"
    assert js.get_job(job_id).state is S.QUEUED
    assert js.get_job(other).state is S.RUNNING  # its lease still runs
    (forced,) = ws.fail_over_workers(ttl_seconds=30, detected_by="t", force=True)
    assert forced.requeued == (other,)


def test_a_claim_committed_after_its_workers_failover_is_rescued_after_its_lease(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    # A claim sent just before its worker was cut off can commit after the failover read the
    # worker's running jobs. Claims do not check the worker's state (that would cost every
    # claim a read of its worker's row), so the job runs on under the dead worker's id until
    # its lease runs out; then the next failover pass puts it back as an orphan.
    js, ws = stores
    register(ws, "cut-off")
    (late_id, _) = [r.job_id for r in js.insert_jobs([new(), new()])]
    (event,) = wait_until(
        lambda: ws.fail_over_workers(ttl_seconds=0.05, detected_by="t"), what="failed over"
    )
    assert event.worker_id == "cut-off" and event.requeued == ()
    [late] = js.claim_jobs(queues=["q"], worker_id="cut-off", limit=1, lease_seconds=0.3)
    assert late.id == late_id and js.get_job(late_id).state is S.RUNNING
    (rescue,) = wait_until(
        lambda: ws.fail_over_workers(ttl_seconds=30, detected_by="t"), what="orphan rescued"
    )
    assert rescue.worker_id == "cut-off" and rescue.requeued == (late_id,)
    assert js.get_job(late_id).state is S.QUEUED
    # The late attempt's completion is refused; the job is claimable again as attempt 2.
    done = js.complete_jobs([Completion(Claim(late.id, late.attempt), S.SUCCEEDED)])
    assert done == [False]
    [again] = js.claim_jobs(queues=["q"], worker_id="other", limit=1, lease_seconds=60)
    assert (again.id, again.attempt) == (late_id, 2)


def test_a_lease_nobody_renews_is_rescued_even_from_an_active_worker(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    # A claim that committed while its reply was lost: the (alive, heartbeating) worker never
    # learned it holds the job, so nobody renews its lease.
    js, ws = stores
    register(ws, "alive")
    (stranded, held) = [r.job_id for r in js.insert_jobs([new(), new()])]
    [lost] = js.claim_jobs(queues=["q"], worker_id="alive", limit=1, lease_seconds=0.2)
    [kept] = js.claim_jobs(queues=["q"], worker_id="alive", limit=1, lease_seconds=600)
    assert (lost.id, kept.id) == (stranded, held)
    ws.heartbeat_worker("alive", PULSE)
    # Its lease ran out, but not yet by a further TTL: left alone.
    assert ws.fail_over_workers(ttl_seconds=30, detected_by="t") == []
    (event,) = wait_until(
        lambda: (
            ws.heartbeat_worker("alive", PULSE)
            and ws.fail_over_workers(ttl_seconds=0.5, detected_by="t")
        ),
        what="stranded job rescued",
    )
    assert event.requeued == (stranded,) and event.worker_id == "alive"
    assert js.get_job(stranded).state is S.QUEUED
    assert js.get_job(held).state is S.RUNNING  # renewed leases are never touched
    assert ws.get_worker("alive").state is W.ACTIVE  # type: ignore[union-attr]
    # A late write of the stranded attempt is refused.
    done = js.complete_jobs([Completion(Claim(lost.id, lost.attempt), S.SUCCEEDED)])
    assert done == [False] and js.get_job(stranded).state is S.QUEUED


def test_concurrent_failovers_move_each_job_once(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    js, ws = stores
    for n in range(4):
        register(ws, f"w{n}")
    js.insert_jobs([new() for _ in range(8)])
    for n in range(4):
        js.claim_jobs(queues=["q"], worker_id=f"w{n}", limit=2, lease_seconds=60)
    import threading

    # Every one of them, not the first listed: on a loaded machine the last registered (and
    # its claim) can come well after the first, and a failover round then missed it.
    wait_until(
        lambda: all(w.heartbeat_age_seconds > 0.3 for w in ws.list_workers()),
        what="heartbeats go stale",
    )
    results: list[list[fleet.FailoverEvent]] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(ws.fail_over_workers(ttl_seconds=0.3, detected_by="x"))
        )
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    events = [e for batch in results for e in batch]
    assert sorted(e.worker_id for e in events) == ["w0", "w1", "w2", "w3"]
    moved = [j for e in events for j in e.requeued]
    assert len(moved) == len(set(moved)) == 8
    assert len(ws.list_failover_events()) == 4
    # One worker's record alone (the dashboard's link from a dead worker's row).
    (mine,) = ws.list_failover_events(worker_id="w2")
    assert mine["worker_id"] == "w2" and len(mine["job_ids"]["requeued"]) == 2
    assert ws.list_failover_events(worker_id="nobody") == []


def test_health_checks_assignments_and_cleanup(stores: tuple[SqlJobStore, SqlFleetAdmin]) -> None:
    js, ws = stores
    register(ws, "w")
    ok = fleet.HealthCheck("w", 1.5, None, 80.0, 3.0, 2, 0.1)
    bad = fleet.HealthCheck("w", 1.5, None, 80.0, 3.0, 2, 99.0, problems=("not consuming",))
    ws.record_health_check(ok)
    ws.record_health_check(bad)
    latest = ws.latest_health_checks(["w", "other"])
    assert set(latest) == {"w"}
    assert latest["w"].check == bad and not latest["w"].check.healthy
    assert latest["w"].age_seconds < 5
    assert ws.delete_health_checks(older_than_days=1) == 0
    assert ws.delete_health_checks(older_than_days=0) == 2

    ids = [r.job_id for r in js.insert_jobs([new(), new(), new()])]
    claimed = js.claim_jobs(queues=["q"], worker_id="w", limit=3, lease_seconds=60)
    starts = [fleet.AssignmentEvent(j.id, j.attempt, "w", j.claimed_at) for j in claimed]
    # A start and its end may arrive in the same batch, or in separate ones.
    ws.record_assignments(
        [*starts[:2], fleet.AssignmentEvent(ids[0], 1, "w", None, fleet.Outcome.SUCCEEDED)]
    )
    ws.record_assignments(
        [starts[2], fleet.AssignmentEvent(ids[1], 1, "w", None, fleet.Outcome.LOST)]
    )
    # The first recorded end wins.
    ws.record_assignments([fleet.AssignmentEvent(ids[1], 1, "w", None, fleet.Outcome.SUCCEEDED)])
    rows = {r["job_id"]: r for r in ws.list_assignments()}
    assert [rows[i]["outcome"] for i in ids] == ["succeeded", "lost", None]
    assert rows[ids[2]]["ended_at"] is None and rows[ids[0]]["ended_at"] is not None
    assert ws.outcome_counts() == {"w": {"succeeded": 1, "lost": 1}}
    assert ws.count_ready_jobs(["q"]) == 0
    js.insert_jobs([new(), new(queue="other")])
    assert ws.count_ready_jobs(["q"]) == 1
    # The third job is put back: its open assignment is now an orphan.
    js.requeue_jobs([Claim(ids[2], 1)])
    assert ws.close_orphaned_assignments() == (1, 0)
    assert ws.list_assignments(job_id=ids[2])[0]["outcome"] == "orphaned"


def test_remove_worker_and_crashed_workers(stores: tuple[SqlJobStore, SqlFleetAdmin]) -> None:
    js, ws = stores
    register(ws, "gone")
    register(ws, "stays")
    register(ws, "clean")
    ws.deregister_worker("clean")
    (job_id,) = [r.job_id for r in js.insert_jobs([new()])]
    js.claim_jobs(queues=["q"], worker_id="gone", limit=1, lease_seconds=600)
    event = ws.remove_worker("gone", detected_by="cli")
    assert event is not None and event.requeued == (job_id,)
    assert js.get_job(job_id).state is S.QUEUED
    with pytest.raises(LookupError):
        ws.remove_worker("gone", detected_by="cli")
    assert ws.remove_crashed_workers(ttl_seconds=30, detected_by="cli") == 1  # "clean"
    assert [w.worker_id for w in ws.list_workers(include_inactive=True)] == ["stays"]
    assert ws.delete_failover_events(older_than_days=1) == 0
    assert ws.delete_failover_events(older_than_days=0) == 1
    assert json.loads(json.dumps(ws.outcome_counts())) == {"gone": {"failed_over": 1}}


def claim_again(js: SqlJobStore) -> Job:
    """Stage the deferred job once it is due and claim it as the old worker."""

    def claim() -> list[Job]:
        js.stage_due_jobs()
        return js.claim_jobs(queues=["q"], worker_id="old", limit=1, lease_seconds=60)

    (job,) = wait_until(claim, timeout=10, what="the deferred job due again")
    return job


def test_a_job_of_an_unknown_task_is_deferred_without_spending_an_attempt(
    stores: tuple[SqlJobStore, SqlFleetAdmin],
) -> None:
    js, ws = stores
    ws.register_worker(
        fleet.Registration("old", "h", 1, ("q",), concurrency=1, version="1", tasks=("t0",))
    )
    (ref,) = js.insert_jobs([NewJob(task="t-new", queue="q", args_json="[]", max_attempts=1)])
    policy = unknown_tasks.UnknownTaskPolicy(grace_seconds=3600, first_delay_seconds=0.01)
    (job,) = js.claim_jobs(queues=["q"], worker_id="old", limit=1, lease_seconds=60)
    verdict = ws.defer_unknown_task(Claim(job.id, job.attempt), policy=policy)
    assert verdict is not None and verdict.deferred and not verdict.declared
    assert verdict.put_backs == 1 and verdict.delay_seconds == 0.01
    after = js.get_job(ref.job_id)
    assert after.state is S.SCHEDULED and after.worker_id is None
    assert (after.attempt, after.max_attempts) == (1, 2)
    # Fenced: the same claim again is stale and writes nothing.
    assert ws.defer_unknown_task(Claim(job.id, job.attempt), policy=policy) is None
    # A second put-back doubles the delay and keeps the first put-back's time.
    again = claim_again(js)
    second = ws.defer_unknown_task(Claim(again.id, again.attempt), policy=policy)
    assert second is not None and second.deferred and second.put_backs == 2
    assert second.delay_seconds == 0.02
    # A live worker of the queue declaring the task keeps the delay short.
    ws.register_worker(
        fleet.Registration("new", "h", 2, ("q",), concurrency=1, version="2", tasks=("t-new",))
    )
    third = claim_again(js)
    verdict = ws.defer_unknown_task(
        Claim(third.id, third.attempt), policy=dataclasses.replace(policy, grace_seconds=0)
    )
    assert verdict is not None and verdict.deferred and verdict.declared
    assert verdict.delay_seconds == 0.01
    # Nobody declares it any more and the grace is over: the caller is told to bury it.
    assert ws.deregister_worker("new")
    fourth = claim_again(js)
    verdict = ws.defer_unknown_task(
        Claim(fourth.id, fourth.attempt), policy=dataclasses.replace(policy, grace_seconds=0)
    )
    assert verdict is not None and verdict.buried and not verdict.declared
    assert js.get_job(ref.job_id).state is S.RUNNING  # nothing written: the caller buries it
    assert js.get_job(ref.job_id).max_attempts - fourth.attempt == 0
