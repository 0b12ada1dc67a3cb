"""ScheduleOps: what operators do with schedules, shared by ``ledgerq schedule`` and the HTTP
API (``/admin/schedules``) so both check, refuse and report the same things. A run-time
schedule is validated in full (cron, zone, policies, queue, arguments, task) before it is stored."""

from __future__ import annotations

from collections.abc import Mapping

from ledgerq.app import wiring
from ledgerq.config.settings import Settings
from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.schedules import (
    Schedule,
    ScheduleNotFound,
    ScheduleOverview,
    ScheduleRequest,
    ScheduleRun,
    ScheduleSource,
    ScheduleState,
    ScheduleStore,
)
from ledgerq.core.tasks import TaskRegistry
from ledgerq.core.validation import check_text
from ledgerq.runtime import cron


class ScheduleOps:
    """The ``ScheduleAdmin`` of one ledger (see ``core.schedules.ScheduleAdmin``)."""

    def __init__(
        self,
        store: ScheduleStore,
        codec: PayloadCodec,
        *,
        tasks: TaskRegistry | None,
        declared: Mapping[str, Schedule],
    ) -> None:
        """``tasks``: the application's tasks, to refuse a schedule of an unknown task (None:
        the tasks are not known here, e.g. a CLI without ``--app``; a tick of an unregistered
        task then goes to the ``default`` queue). ``declared``: the schedules the application's
        code declares, which only the code may delete."""
        self._store = store
        self._codec = codec
        self._tasks = tasks
        self._declared = declared

    def list_schedules(self) -> list[ScheduleOverview]:
        """Every schedule by name, with its newest run (one query per schedule)."""
        return [self._with_last_run(state) for state in self._store.list_schedules()]

    def list_runs(self, name: str, *, limit: int) -> list[ScheduleRun]:
        """Newest first; ``ScheduleNotFound`` if neither the schedule nor a run of it exists
        (a removed schedule keeps its history)."""
        runs = self._store.list_runs(_storable(name), limit=limit)
        if not runs:
            self._find(name)
        return runs

    def add_schedule(self, request: ScheduleRequest) -> ScheduleOverview:
        """Validate and store a run-time schedule; it fires from the next scheduler pass on."""
        schedule = cron.build_schedule(
            request.name,
            cron_expression=request.cron,
            task=request.task,
            args_json=self._codec.encode_args(request.args, request.kwargs),
            tz=request.tz,
            queue=request.queue,
            missed=request.missed,
            max_catchup=request.max_catchup,
            overlap=request.overlap,
            source=ScheduleSource.RUNTIME,
        )
        if self._tasks is not None and schedule.task not in self._tasks:
            raise errors.TaskNotRegistered(schedule.task)
        self._store.add_schedule(schedule)
        return self._find(schedule.name)

    def remove_schedule(self, name: str) -> None:
        """Delete a run-time schedule, or a code one the application no longer declares."""
        if name in self._declared:
            raise errors.InvalidTransition(
                f"schedule {name!r} is declared in the application's code; pause it, or delete"
                " it from the code"
            )
        if not self._store.remove_schedule(_storable(name)):
            raise ScheduleNotFound(name)

    def pause_schedule(self, name: str) -> ScheduleOverview:
        """Stop ``name`` from firing (kept across scheduler restarts)."""
        return self._set_paused(name, True)

    def resume_schedule(self, name: str) -> ScheduleOverview:
        """Let ``name`` fire again from now on (the ticks of the pause never run)."""
        return self._set_paused(name, False)

    def _set_paused(self, name: str, paused: bool) -> ScheduleOverview:
        if not self._store.set_paused(_storable(name), paused):
            raise ScheduleNotFound(name)
        return self._find(name)

    def _find(self, name: str) -> ScheduleOverview:
        found = [s for s in self._store.list_schedules() if s.schedule.name == name]
        if not found:
            raise ScheduleNotFound(name)
        return self._with_last_run(found[0])

    def _with_last_run(self, state: ScheduleState) -> ScheduleOverview:
        newest = self._store.list_runs(state.schedule.name, limit=1)
        return ScheduleOverview(state, newest[0] if newest else None)


def schedule_ops(
    settings: Settings,
    parts: wiring.Parts,
    registry: TaskRegistry,
    declared: Mapping[str, Schedule],
) -> ScheduleOps:
    """The schedule operations of an application (its settings, parts, tasks and declared
    schedules). Task names are checked when the application is known: ``--app`` is set or it
    registers tasks."""
    known = registry if settings.app or len(registry) else None
    return ScheduleOps(wiring.schedule_store(parts), parts.codec, tasks=known, declared=declared)


def _storable(name: str) -> str:
    """``name`` if a stored schedule could bear it; else ``ScheduleNotFound`` (a name no row
    can hold, such as one with a NUL or a lone surrogate, would fail in the database)."""
    return check_text(
        name, what="schedule name", max_length=200, error=lambda _: ScheduleNotFound(name)
    )
