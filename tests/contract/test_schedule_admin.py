"""The ScheduleAdmin contract on every database: what ``ledgerq schedule`` and
``/admin/schedules`` do with schedules, refusals included."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ledgerq.app.schedule_ops import ScheduleOps
from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.schedules import (
    InvalidScheduleDefinition,
    Schedule,
    ScheduleExists,
    ScheduleNotFound,
    ScheduleRequest,
    ScheduleSource,
)
from ledgerq.core.tasks import TaskRegistry, TaskSpec
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.schedule_store import SqlScheduleStore

CODE = Schedule(name="code", cron="* * * * *", task="t", source=ScheduleSource.CODE)


@pytest.fixture
def admin(engine: sa.Engine) -> ScheduleOps:
    store = SqlScheduleStore(SqlJobStore(engine))
    store.upsert_schedules([CODE])
    tasks = TaskRegistry()
    tasks.add(TaskSpec("t", lambda ctx: None))
    return ScheduleOps(store, PayloadCodec(), tasks=tasks, declared={"code": CODE})


def test_a_run_time_schedule_is_stored_listed_paused_resumed_and_removed(
    admin: ScheduleOps,
) -> None:
    added = admin.add_schedule(ScheduleRequest("nightly", "0 3 * * *", "t", args=(1,)))
    assert added.state.schedule.name == "nightly" and added.last_run is None
    assert not added.state.paused
    assert [o.state.schedule.name for o in admin.list_schedules()] == ["code", "nightly"]
    assert admin.pause_schedule("nightly").state.paused
    assert not admin.resume_schedule("nightly").state.paused
    assert admin.list_runs("nightly", limit=10) == []
    admin.remove_schedule("nightly")
    assert [o.state.schedule.name for o in admin.list_schedules()] == ["code"]


def test_bad_and_conflicting_requests_are_refused(admin: ScheduleOps) -> None:
    admin.add_schedule(ScheduleRequest("taken", "* * * * *", "t"))
    with pytest.raises(ScheduleExists):
        admin.add_schedule(ScheduleRequest("taken", "* * * * *", "t"))
    with pytest.raises(InvalidScheduleDefinition):
        admin.add_schedule(ScheduleRequest("bad", "not a cron", "t"))
    with pytest.raises(errors.TaskNotRegistered):
        admin.add_schedule(ScheduleRequest("stranger", "* * * * *", "unknown.task"))
    with pytest.raises(errors.InvalidTransition):
        admin.remove_schedule("code")  # declared in code: pause it instead
    for act in (admin.remove_schedule, admin.pause_schedule, admin.resume_schedule):
        with pytest.raises(ScheduleNotFound):
            act("nobody")
    with pytest.raises(ScheduleNotFound):
        admin.list_runs("nobody", limit=10)
