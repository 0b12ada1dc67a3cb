"""``find_unserved``: which tasks and schedules enqueue to a queue that no worker consumes."""

from __future__ import annotations

from ledgerq.core.schedules import Schedule
from ledgerq.core.tasks import TaskSpec
from ledgerq.core.unserved import UnservedWork, find_unserved


def noop(ctx: object) -> None:
    """A handler; never run here."""


TASKS = [TaskSpec("send_sms", noop, queue="sms"), TaskSpec("report", noop)]


def test_a_task_on_a_queue_nobody_consumes_is_named_with_its_queue() -> None:
    (work,) = find_unserved(TASKS, [], consumed={"default"})
    assert work == UnservedWork("task", "send_sms", "send_sms", "sms")
    assert "send_sms" in work.describe() and "'sms'" in work.describe()
    assert find_unserved(TASKS, [], consumed={"default", "sms"}) == []


def test_a_schedule_uses_its_own_queue_or_else_its_tasks() -> None:
    schedules = [
        Schedule("nightly", "0 2 * * *", "report", queue="reports"),
        Schedule("sms-digest", "0 8 * * *", "send_sms"),
        Schedule("elsewhere", "0 9 * * *", "another_apps_task"),  # queue unknown: skipped
    ]
    found = find_unserved(TASKS, schedules, consumed={"default"})
    assert [(w.kind, w.name, w.queue) for w in found] == [
        ("task", "send_sms", "sms"),
        ("schedule", "nightly", "reports"),
        ("schedule", "sms-digest", "sms"),
    ]
    assert "schedule nightly (task report)" in found[1].describe()
