"""Scheduler: fires the ticks of every schedule, as many instances as you like at once.

Each pass reads the database clock and every schedule, plans the due ticks (runtime/cron.py)
and fires them one by one through ``ScheduleStore.fire_tick``, whose unique run row makes a
tick fire once fleet-wide. Progress (``last_tick``) moves only past ticks that were fired (by
anyone) or dropped by the missed-tick policy, so an instance killed mid-pass leaves its
remaining ticks to the others.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from ledgerq.core import errors
from ledgerq.core.job import JobHint, NewJob, check_queue_name
from ledgerq.core.ports import Transport
from ledgerq.core.schedules import (
    FireOutcome,
    Schedule,
    ScheduleSource,
    ScheduleState,
    ScheduleStore,
)
from ledgerq.core.tasks import TaskRegistry
from ledgerq.runtime import cron
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.scheduler")

#: Passes land this long after a tick is due, not just before it.
LATE_SECONDS = 0.005


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """How often the scheduler looks and what it counts as a missed tick (seconds)."""

    poll_interval_seconds: float = 1.0
    """Longest sleep between passes (a pass also runs right after the next tick is due)."""
    grace_seconds: float = 60.0
    """Ticks at most this old when seen are late, not missed: they all fire."""


@dataclass(slots=True)
class PassReport:
    """What one pass did, per outcome, and the schedules it failed on."""

    fired: dict[str, int] = field(default_factory=dict)
    taken: int = 0
    skipped_overlap: int = 0
    errors: int = 0
    next_due_at: datetime | None = None
    seconds_to_next: float | None = None
    """By the database clock at the pass's start: how long until the earliest next tick."""


def job_for(registry: TaskRegistry, schedule: Schedule) -> NewJob:
    """The job a tick of ``schedule`` enqueues: the task's defaults (queue, priority, attempts,
    timeout) when the application registers it, else the ``default`` queue."""
    spec = registry.get(schedule.task) if schedule.task in registry else None
    queue = schedule.queue or (spec.queue if spec is not None else "default")
    return NewJob(
        task=schedule.task,
        queue=check_queue_name(queue),
        args_json=schedule.args_json,
        priority=spec.priority if spec is not None else 0,
        max_attempts=spec.retry.max_attempts if spec is not None else 3,
        timeout_seconds=spec.timeout_seconds if spec is not None else None,
    )


class Scheduler(PeriodicService):
    """Runs passes on its own thread (``start``/``stop``), in the foreground (``run``) or one
    at a time (``run_once``). A pass also runs just after the next tick is due; stopping waits
    for the current tick (a tick's transaction is never cut in half)."""

    thread_name = "ledgerq-scheduler"
    logger = log
    failure_message = "scheduler pass failed"
    first_delay: float | None = 0.0
    join_seconds: float | None = 30.0

    def __init__(
        self,
        store: ScheduleStore,
        transport: Transport,
        build_job: Callable[[Schedule], NewJob],
        instance_id: str,
        options: SchedulerOptions | None = None,
        on_fired: Callable[[str], None] | None = None,
    ) -> None:
        """``build_job`` makes a tick's job; ``instance_id`` is recorded as ``executed_by``;
        ``on_fired(schedule_name)`` (optional) counts fired ticks, e.g. for metrics."""
        self._options = options or SchedulerOptions()
        super().__init__(self._options.poll_interval_seconds + LATE_SECONDS)
        self._store = store
        self._transport = transport
        self._build_job = build_job
        self.instance_id = instance_id
        self._on_fired = on_fired
        self._declared: set[str] = set()

    def declare(self, schedules: Sequence[Schedule]) -> None:
        """Store the application's code-declared schedules (idempotent; run at start). This
        scheduler fires those and every run-time schedule; a code schedule that no longer
        appears in the code stays stored but fires nowhere until ``schedule remove``."""
        self._declared = {s.name for s in schedules}
        if schedules:
            self._store.upsert_schedules(list(schedules))

    def _fires(self, state: ScheduleState) -> bool:
        schedule = state.schedule
        if state.paused or self.stopping:
            return False
        return schedule.source is ScheduleSource.RUNTIME or schedule.name in self._declared

    def tick(self) -> float:
        """One pass; return the wait until the next (a database outage is logged by the
        service loop and retried after the poll interval, never fatal)."""
        started = time.monotonic()
        report = self.run_once()
        wait = self._options.poll_interval_seconds
        if report.seconds_to_next is not None:
            due_in = report.seconds_to_next - (time.monotonic() - started)
            wait = min(wait, max(due_in, 0.0))
        return wait + LATE_SECONDS

    def run_once(self) -> PassReport:
        """One pass over every active schedule; raise ``StoreError`` if the ledger is down."""
        report = PassReport()
        now = self._store.database_now()
        for state in self._store.list_schedules():
            if not self._fires(state):
                continue
            try:
                self._run_schedule(state, now, report)
            except errors.StoreError as exc:
                report.errors += 1
                log.warning("schedule failed", schedule=state.schedule.name, error=str(exc))
            except errors.LedgerqError as exc:  # e.g. a stored cron that no longer parses
                report.errors += 1
                log.error("schedule is unusable", schedule=state.schedule.name, error=str(exc))
        if report.next_due_at is not None:
            report.seconds_to_next = (report.next_due_at - now).total_seconds()
        return report

    def _run_schedule(self, state: ScheduleState, now: datetime, report: PassReport) -> None:
        schedule = state.schedule
        plan = cron.plan_ticks(
            schedule,
            last_tick=state.last_tick,
            now=now,
            grace_seconds=self._options.grace_seconds,
        )
        for tick in plan.fire:
            if self.stopping:
                return  # progress stays before the unfired ticks
            self._fire(schedule, tick, report)
        self._store.advance(schedule.name, last_tick=plan.last_tick, next_tick=plan.next_tick)
        if report.next_due_at is None or plan.next_tick < report.next_due_at:
            report.next_due_at = plan.next_tick

    def _fire(self, schedule: Schedule, tick: datetime, report: PassReport) -> None:
        job = self._build_job(schedule)
        result = self._store.fire_tick(schedule, tick, job, executed_by=self.instance_id)
        if result.outcome is FireOutcome.TAKEN:
            report.taken += 1
        elif result.outcome is FireOutcome.SKIPPED_OVERLAP:
            report.skipped_overlap += 1
            log.info(
                "tick skipped: previous run unfinished",
                schedule=schedule.name,
                tick=tick.isoformat(),
            )
        elif result.outcome is FireOutcome.FIRED and result.job_id is not None:
            report.fired[schedule.name] = report.fired.get(schedule.name, 0) + 1
            log.info(
                "tick fired", schedule=schedule.name, tick=tick.isoformat(), job_id=result.job_id
            )
            if self._on_fired is not None:
                self._on_fired(schedule.name)
            self._announce(JobHint(result.job_id, job.queue, job.priority))

    def _announce(self, hint: JobHint) -> None:
        try:
            self._transport.push([hint])
        except errors.TransportError as exc:
            # The job is in the ledger; workers find it by query or via the reconciler.
            log.warning("could not announce a scheduled job", job_id=hint.job_id, error=str(exc))
