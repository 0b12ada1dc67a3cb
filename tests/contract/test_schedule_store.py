"""SqlScheduleStore and the Scheduler's passes against SQLite, PostgreSQL and MariaDB: the
unique (schedule, tick) race, missed-tick policies, overlap, pause/resume, upserts."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from ledgerq.core import errors
from ledgerq.core.job import NewJob
from ledgerq.core.schedules import (
    FireOutcome,
    MissedPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleSource,
)
from ledgerq.core.tasks import TaskRegistry
from ledgerq.runtime.scheduler import Scheduler, SchedulerOptions, job_for
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.schedule_store import SqlScheduleStore
from ledgerq.store.tables import jobs, schedule_runs, schedules
from ledgerq.transport.polling import PollingTransport
from tests.conftest import engine_for


@pytest.fixture
def store(database_url: str) -> Iterator[SqlScheduleStore]:
    engine = engine_for(database_url, pool_size=4)
    yield SqlScheduleStore(SqlJobStore(engine))
    engine.dispose()


def minutely(name: str = "m", **kw: object) -> Schedule:
    kw.setdefault("source", ScheduleSource.RUNTIME)
    return Schedule(name=name, cron="* * * * *", task="t", **kw)  # type: ignore[arg-type]


def job() -> NewJob:
    return NewJob(task="t", queue="default", args_json='{"args":[],"kwargs":{}}')


def count(store: SqlScheduleStore, table: sa.Table) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())


def scheduler(store: SqlScheduleStore, instance: str = "test-1") -> Scheduler:
    return Scheduler(
        store,
        PollingTransport(),
        lambda s: job_for(TaskRegistry(), s),
        instance,
        SchedulerOptions(grace_seconds=0.0),
    )


def set_last_tick(store: SqlScheduleStore, name: str, value: datetime) -> None:
    with store.engine.begin() as conn:
        conn.execute(
            sa.update(schedules)
            .where(schedules.c.name == name)
            .values(last_tick=store.dialect.bind_time(value))
        )


def test_two_instances_firing_the_same_tick_make_one_job(store: SqlScheduleStore) -> None:
    s = minutely()
    store.add_schedule(s)
    base = store.database_now().replace(second=0, microsecond=0)
    ticks = [base - timedelta(minutes=i) for i in range(10)]
    outcomes: dict[str, Counter[FireOutcome]] = {"a": Counter(), "b": Counter()}

    def fire_all(instance: str, barrier: threading.Barrier) -> None:
        for tick in ticks:
            barrier.wait(30)  # both threads insert the same tick at the same moment
            outcomes[instance][store.fire_tick(s, tick, job(), executed_by=instance).outcome] += 1

    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=fire_all, args=(i, barrier)) for i in outcomes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    total = outcomes["a"] + outcomes["b"]
    assert total == Counter({FireOutcome.FIRED: 10, FireOutcome.TAKEN: 10})
    # The loser's job rolled back with its run row: one job per tick, each one referenced.
    assert count(store, jobs) == count(store, schedule_runs) == 10
    runs = store.list_runs(s.name)
    assert sorted(r.tick for r in runs) == sorted(ticks)
    assert {r.executed_by for r in runs} <= {"a", "b"}
    with store.engine.connect() as conn:
        job_ids = set(conn.execute(sa.select(jobs.c.id)).scalars())
    assert {r.job_id for r in runs} == job_ids


@pytest.mark.parametrize(
    ("missed", "expected_jobs"),
    [(MissedPolicy.SKIP, 0), (MissedPolicy.ONCE, 1), (MissedPolicy.ALL, 3)],
)
def test_ticks_missed_while_no_scheduler_ran_follow_the_policy(
    store: SqlScheduleStore, missed: MissedPolicy, expected_jobs: int
) -> None:
    s = minutely(missed=missed, max_catchup=3)
    store.add_schedule(s)
    now = store.database_now()
    set_last_tick(store, s.name, now - timedelta(minutes=10))
    report = scheduler(store).run_once()
    assert report.fired.get(s.name, 0) == expected_jobs
    assert count(store, jobs) == expected_jobs
    # Progress moved to the pass's "now": a second pass (or instance) fires nothing more.
    (state,) = store.list_schedules()
    assert state.last_tick is not None and state.last_tick >= now
    latest = state.last_tick.replace(second=0, microsecond=0)
    ticks = sorted(r.tick for r in store.list_runs(s.name))
    assert ticks == [latest - timedelta(minutes=i) for i in range(expected_jobs)][::-1]
    assert state.next_tick == latest + timedelta(minutes=1)
    assert scheduler(store, "test-2").run_once().fired == {}
    assert count(store, jobs) == expected_jobs


def test_overlap_skip_holds_a_tick_while_the_previous_job_is_unfinished(
    store: SqlScheduleStore,
) -> None:
    careful, eager = minutely("careful", overlap=OverlapPolicy.SKIP), minutely("eager")
    for s in (careful, eager):
        store.add_schedule(s)
    tick = store.database_now().replace(second=0, microsecond=0)
    first = store.fire_tick(careful, tick, job(), executed_by="x")
    second = store.fire_tick(careful, tick + timedelta(minutes=1), job(), executed_by="x")
    assert (first.outcome, second.outcome) == (FireOutcome.FIRED, FireOutcome.SKIPPED_OVERLAP)
    assert second.job_id is None
    # The skip is recorded once, like a fired tick, so no other instance fires it either.
    again = store.fire_tick(careful, tick + timedelta(minutes=1), job(), executed_by="y")
    assert again.outcome is FireOutcome.TAKEN
    with store.engine.begin() as conn:
        conn.execute(sa.update(jobs).where(jobs.c.id == first.job_id).values(state="succeeded"))
    third = store.fire_tick(careful, tick + timedelta(minutes=2), job(), executed_by="x")
    assert third.outcome is FireOutcome.FIRED
    # overlap=allow fires whatever the previous job does.
    outcomes = [
        store.fire_tick(eager, tick + timedelta(minutes=i), job(), executed_by="x").outcome
        for i in range(2)
    ]
    assert outcomes == [FireOutcome.FIRED, FireOutcome.FIRED]
    assert count(store, jobs) == 4


def test_a_paused_schedule_fires_nothing_and_resumes_from_now(store: SqlScheduleStore) -> None:
    s = minutely(missed=MissedPolicy.ALL)
    store.add_schedule(s)
    assert store.set_paused(s.name, True)
    tick = store.database_now().replace(second=0, microsecond=0)
    assert store.fire_tick(s, tick, job(), executed_by="x").outcome is FireOutcome.INACTIVE
    set_last_tick(store, s.name, tick - timedelta(minutes=30))
    assert scheduler(store).run_once().fired == {}
    assert count(store, jobs) == 0
    assert store.set_paused(s.name, False)
    (state,) = store.list_schedules()
    assert not state.paused and state.last_tick is None  # the pause's ticks never run
    assert scheduler(store).run_once().fired == {}
    assert count(store, jobs) == 0
    assert not store.set_paused("nope", True)


def test_code_schedules_fire_only_where_declared(store: SqlScheduleStore) -> None:
    code = minutely("code", source=ScheduleSource.CODE, missed=MissedPolicy.ONCE)
    declaring, other = scheduler(store, "declaring"), scheduler(store, "other")
    declaring.declare([code])
    other.declare([])
    set_last_tick(store, code.name, store.database_now() - timedelta(minutes=5))
    assert other.run_once().fired == {}  # its application no longer declares "code"
    assert declaring.run_once().fired == {"code": 1}


def test_code_schedules_upsert_keeps_pause_and_progress(store: SqlScheduleStore) -> None:
    store.upsert_schedules([minutely("code", source=ScheduleSource.CODE)])
    store.set_paused("code", True)
    now = store.database_now()
    store.advance("code", last_tick=now, next_tick=None)
    store.upsert_schedules(
        [minutely("code", source=ScheduleSource.CODE, tz="Europe/Berlin", queue="reports")]
    )
    (state,) = store.list_schedules()
    assert (state.schedule.tz, state.schedule.queue) == ("Europe/Berlin", "reports")
    assert state.paused and state.last_tick == now
    # Progress never goes backwards.
    store.advance("code", last_tick=now - timedelta(hours=1), next_tick=None)
    assert store.list_schedules()[0].last_tick == now


def test_add_remove_and_duplicate_names(store: SqlScheduleStore) -> None:
    runtime = minutely("r", source=ScheduleSource.RUNTIME)
    store.add_schedule(runtime)
    with pytest.raises(errors.ConfigError, match="a schedule named 'r' exists"):
        store.add_schedule(runtime)
    assert [s.schedule for s in store.list_schedules()] == [runtime]
    assert store.remove_schedule("r") and not store.remove_schedule("r")
    assert store.list_schedules() == []
