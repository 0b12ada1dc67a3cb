"""Work nobody will do: the registered tasks and declared schedules whose queue no worker
consumes. Their jobs are accepted and then wait forever, so a worker start and
``worker validate-config`` name them. Pure: the caller says which queues are consumed."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Literal

from ledgerq.core.schedules import Schedule
from ledgerq.core.tasks import TaskSpec


@dataclass(frozen=True, slots=True)
class UnservedWork:
    """A task (or a schedule, which enqueues ``task``) whose jobs go to ``queue``, which no
    worker consumes."""

    kind: Literal["task", "schedule"]
    name: str
    task: str
    queue: str

    def describe(self) -> str:
        """One line for a person: what, which queue, and what follows."""
        what = f"task {self.name}" if self.kind == "task" else f"schedule {self.name}"
        via = "" if self.kind == "task" else f" (task {self.task})"
        return f"{what}{via} enqueues to queue {self.queue!r}, which no worker consumes"

    def as_dict(self) -> dict[str, str]:
        """The fields, for JSON output and structured logs."""
        return {"kind": self.kind, "name": self.name, "task": self.task, "queue": self.queue}


def find_unserved(
    tasks: Iterable[TaskSpec], schedules: Iterable[Schedule], consumed: Collection[str]
) -> list[UnservedWork]:
    """The tasks, then the schedules, whose queue is not in ``consumed``, in name order. A
    schedule without a queue of its own uses its task's; one whose task is not registered here
    is skipped (its queue is unknown, and the worker reports unknown tasks when they run)."""
    specs = {spec.name: spec for spec in tasks}
    found = [
        UnservedWork("task", spec.name, spec.name, spec.queue)
        for spec in specs.values()
        if spec.queue not in consumed
    ]
    for schedule in schedules:
        spec = specs.get(schedule.task)
        queue = schedule.queue or (spec.queue if spec is not None else None)
        if queue is not None and queue not in consumed:
            found.append(UnservedWork("schedule", schedule.name, schedule.task, queue))
    return sorted(found, key=lambda work: (work.kind != "task", work.name))
