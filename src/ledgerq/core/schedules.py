"""Periodic schedules: their definition, the policies for missed ticks and overlap, and the
``ScheduleStore`` port. A tick fires at most once fleet-wide because the store writes a unique
``(schedule, tick)`` run row in the same transaction as the tick's job.

The port lives here rather than in ports.py so the scheduler stays one self-contained feature.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from ledgerq.core import errors
from ledgerq.core.job import NewJob
from ledgerq.core.validation import check_text, is_encodable

SCHEDULE_NAME = re.compile(r"^[^\s\x00-\x1f]{1,200}$")
#: Most missed ticks ``missed="all"`` may run at once: a long outage must not flood the queue.
MAX_CATCHUP_LIMIT = 1000


class MissedPolicy(StrEnum):
    """What happens to ticks missed while no scheduler ran (older than the grace period)."""

    SKIP = "skip"
    """Missed ticks are dropped; only ticks within the grace period run."""
    ONCE = "once"
    """The latest missed tick runs once, standing in for all of them."""
    ALL = "all"
    """Each missed tick runs, the latest ``max_catchup`` of them."""


class OverlapPolicy(StrEnum):
    """Whether a tick fires while the job of the schedule's previous run is unfinished."""

    SKIP = "skip"
    """The tick is recorded as skipped and no job is created."""
    ALLOW = "allow"
    """The tick fires regardless."""


class ScheduleSource(StrEnum):
    """Where a schedule was declared."""

    CODE = "code"
    """``@app.periodic`` in the application; upserted whenever a scheduler starts."""
    RUNTIME = "runtime"
    """``ledgerq schedule add``; lives only in the database."""


class InvalidScheduleDefinition(errors.ConfigError):
    """A schedule that cannot work: its name, cron expression, time zone, a policy, its queue
    or ``max_catchup``. The message names the problem; ``field`` names the setting at fault
    (``name``, ``cron``, ``tz``, ``missed``, ``overlap``, ``queue``, ``max_catchup``)."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class ScheduleExists(errors.ConfigError):
    """A schedule of that name is stored already."""

    def __init__(self, name: str) -> None:
        super().__init__(f"a schedule named {name!r} exists")
        self.name = name


class ScheduleNotFound(errors.StoreError):
    """No schedule of that name is stored."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r}")
        self.name = name


def check_schedule_name(name: str) -> str:
    """Return ``name`` if it is a valid schedule name, else raise
    ``InvalidScheduleDefinition``."""
    if not isinstance(name, str) or not SCHEDULE_NAME.fullmatch(name) or not is_encodable(name):
        raise InvalidScheduleDefinition(
            f"invalid schedule name {name!r}: use 1-200 characters without spaces",
            field="name",
        )
    return name


@dataclass(frozen=True, slots=True)
class Schedule:
    """A periodic task: enqueue ``task`` with ``args_json`` at every tick of ``cron`` (5 fields,
    or 6 with seconds first) read in time zone ``tz``. ``queue`` None means the task's own."""

    name: str
    cron: str
    task: str
    args_json: str = '{"args": [], "kwargs": {}}'
    tz: str = "UTC"
    queue: str | None = None
    missed: MissedPolicy = MissedPolicy.SKIP
    max_catchup: int = 10
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    source: ScheduleSource = ScheduleSource.CODE

    def __post_init__(self) -> None:
        check_schedule_name(self.name)
        # The same caps as the HTTP API's: a 10 KB "cron expression" is a mistake or an attack.
        for field_name, max_length in (("cron", 200), ("task", 200), ("tz", 100)):
            check_text(
                getattr(self, field_name),
                what=field_name,
                max_length=max_length,
                error=functools.partial(InvalidScheduleDefinition, field=field_name),
            )
        if not 1 <= self.max_catchup <= MAX_CATCHUP_LIMIT:
            raise InvalidScheduleDefinition(
                f"max_catchup must lie within 1..{MAX_CATCHUP_LIMIT}, got {self.max_catchup}",
                field="max_catchup",
            )


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """A schedule as stored, with its run-time state. ``last_tick``: every tick up to it was
    fired or deliberately skipped (None: the next scheduler pass starts from now)."""

    schedule: Schedule
    paused: bool
    last_tick: datetime | None
    next_tick: datetime | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``args``: the stored ``{"args": [...], "kwargs": {...}}``)."""
        s = self.schedule
        return {
            "name": s.name,
            "cron": s.cron,
            "tz": s.tz,
            "task": s.task,
            "args": json.loads(s.args_json),
            "queue": s.queue,
            "paused": self.paused,
            "missed": s.missed.value,
            "max_catchup": s.max_catchup,
            "overlap": s.overlap.value,
            "source": s.source.value,
            "last_tick": _iso(self.last_tick),
            "next_tick": _iso(self.next_tick),
        }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


class FireOutcome(StrEnum):
    """What ``ScheduleStore.fire_tick`` did."""

    FIRED = "fired"
    """This call created the tick's job."""
    TAKEN = "taken"
    """Another instance fired this tick first (its unique run row exists)."""
    SKIPPED_OVERLAP = "skipped_overlap"
    """The previous run's job is unfinished and the overlap policy is ``skip``."""
    INACTIVE = "inactive"
    """The schedule is paused or was removed meanwhile."""


@dataclass(frozen=True, slots=True)
class FireResult:
    """The outcome of one tick, and the job it created if it fired."""

    outcome: FireOutcome
    job_id: int | None = None


@dataclass(frozen=True, slots=True)
class ScheduleRun:
    """One fired (or overlap-skipped) tick: its job and the instance that fired it."""

    schedule: str
    tick: datetime
    job_id: int | None
    executed_by: str


class ScheduleStore(Protocol):
    """The schedules table and the run rows that make each tick fire once."""

    def database_now(self) -> datetime:
        """The database clock (aware UTC): several instances compare ticks against it."""

    def upsert_schedules(self, schedules: list[Schedule]) -> None:
        """Create or update code-declared schedules; their pause state and progress stay."""

    def add_schedule(self, schedule: Schedule) -> None:
        """Create a schedule; raise ``ScheduleExists`` if the name is taken."""

    def remove_schedule(self, name: str) -> bool:
        """Delete a schedule (its run history stays); False if there was none."""

    def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume; resuming forgets the ticks of the pause. False if unknown."""

    def list_schedules(self) -> list[ScheduleState]:
        """Every schedule, by name."""

    def fire_tick(
        self, schedule: Schedule, tick: datetime, job: NewJob, *, executed_by: str
    ) -> FireResult:
        """In one transaction: insert ``job`` and the unique ``(schedule, tick)`` run row; a
        duplicate loses on the key and rolls back its job (``TAKEN``)."""

    def advance(self, name: str, *, last_tick: datetime, next_tick: datetime | None) -> None:
        """Move the schedule's progress forward to ``last_tick`` (never backwards)."""

    def list_runs(self, name: str, *, limit: int = 100) -> list[ScheduleRun]:
        """The schedule's newest runs first."""


@dataclass(frozen=True, slots=True)
class ScheduleOverview:
    """A stored schedule with its newest run (None before its first fired tick)."""

    state: ScheduleState
    last_run: ScheduleRun | None


@dataclass(frozen=True, slots=True)
class ScheduleRequest:
    """A run-time schedule an operator asks for, as given (checked by ``add_schedule``):
    ``missed`` and ``overlap`` are policy names, ``queue`` None means the task's own."""

    name: str
    cron: str
    task: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    tz: str = "UTC"
    queue: str | None = None
    missed: str = MissedPolicy.SKIP.value
    max_catchup: int = 10
    overlap: str = OverlapPolicy.ALLOW.value


class ScheduleAdmin(Protocol):
    """What operators do with schedules (``ledgerq schedule`` and ``/admin/schedules``)."""

    def list_schedules(self) -> list[ScheduleOverview]:
        """Every schedule by name, with its newest run."""

    def list_runs(self, name: str, *, limit: int) -> list[ScheduleRun]:
        """The newest ``limit`` runs of ``name``, newest first; ``ScheduleNotFound`` if no
        schedule and no run of that name is stored (a removed schedule keeps its history)."""

    def add_schedule(self, request: ScheduleRequest) -> ScheduleOverview:
        """Store a run-time schedule and return it; raise ``InvalidScheduleDefinition``,
        ``PayloadError``, ``TaskNotRegistered`` (when the application's tasks are known) or
        ``ScheduleExists``."""

    def remove_schedule(self, name: str) -> None:
        """Delete ``name`` (its runs stay); ``ScheduleNotFound`` if unknown,
        ``InvalidTransition`` if the application's code declares it."""

    def pause_schedule(self, name: str) -> ScheduleOverview:
        """Stop ``name`` from firing; ``ScheduleNotFound`` if unknown."""

    def resume_schedule(self, name: str) -> ScheduleOverview:
        """Let ``name`` fire again from now on; ``ScheduleNotFound`` if unknown."""
