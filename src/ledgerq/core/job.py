"""The job as the ledger records it (``Job``) and as a producer asks for it (``NewJob``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any

from ledgerq.core import errors
from ledgerq.core.states import JobState

QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
#: A delay longer than this is almost certainly a unit mistake (ms passed as s).
MAX_DELAY_SECONDS = 366 * 24 * 3600.0


def check_queue_name(name: str) -> str:
    """Return ``name`` if it is a valid queue name, else raise ``InvalidQueueName``."""
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise errors.InvalidQueueName(
            f"invalid queue name {name!r}: use 1-64 letters, digits, '_', '-', '.' or ':',"
            " starting with a letter or digit"
        )
    return name


def check_delay(delay_seconds: float) -> float:
    """Return ``delay_seconds`` if it is a sane delay, else raise ``InvalidSchedule``."""
    if not isinstance(delay_seconds, int | float) or delay_seconds != delay_seconds:
        raise errors.InvalidSchedule(f"delay must be a number of seconds, got {delay_seconds!r}")
    if delay_seconds < 0:
        raise errors.InvalidSchedule(f"delay must not be negative, got {delay_seconds}")
    if delay_seconds > MAX_DELAY_SECONDS:
        raise errors.InvalidSchedule(
            f"delay of {delay_seconds:.0f} s is more than a year; pass run_at for far dates"
        )
    return float(delay_seconds)


def check_dedupe_window(
    dedupe_for: float | timedelta | None, dedupe_key: str | None
) -> float | None:
    """Return a ``dedupe_for`` window (seconds or a timedelta) in seconds, or None; raise
    ``InvalidJob`` unless it is positive, at most a year and comes with a ``dedupe_key``."""
    if dedupe_for is None:
        return None
    seconds = dedupe_for.total_seconds() if isinstance(dedupe_for, timedelta) else dedupe_for
    if not isinstance(seconds, int | float) or seconds != seconds:
        raise errors.InvalidJob(f"dedupe_for must be seconds or a timedelta, got {dedupe_for!r}")
    if dedupe_key is None:
        raise errors.InvalidJob("dedupe_for needs a dedupe_key")
    if not 0 < seconds <= MAX_DELAY_SECONDS:
        raise errors.InvalidJob(f"dedupe_for must be over 0 s and at most a year, got {seconds}")
    return float(seconds)


def _aware_utc(value: object) -> datetime | None:
    """A column's timestamp as an aware UTC datetime; None for anything else."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo is UTC else as_utc(value)


def as_utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; naive values are taken to be UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def check_run_at(run_at: datetime | None, *, what: str = "run_at") -> datetime | None:
    """``run_at`` in UTC if it names a moment within a year of now; ``InvalidSchedule`` for a
    time without a zone (whose moment depends on the reader's clock) or one further off."""
    if run_at is None:
        return None
    if run_at.tzinfo is None:
        raise errors.InvalidSchedule(f"{what} needs a time zone (e.g. 2030-01-01T00:00:00Z)")
    now = datetime.now(UTC)
    window = timedelta(seconds=MAX_DELAY_SECONDS)
    if not now - window <= run_at <= now + window:
        raise errors.InvalidSchedule(f"{what} must lie within a year of now")
    return as_utc(run_at)


@dataclass(slots=True, kw_only=True)
class JobOptions:
    """How a producer asks for a job to run, spelled once: ``Task.enqueue``, ``Client.build``
    and a batch member's ``add`` take these by name. None means the task's own setting. Not
    frozen: one is built per enqueued job, and a frozen dataclass's init costs more."""

    queue: str | None = None
    priority: int | None = None
    delay: float = 0.0
    run_at: datetime | None = None
    dedupe_key: str | None = None
    dedupe_for: float | timedelta | None = None
    """Keep ``dedupe_key`` taken this long after the enqueue, even once the job finished."""
    max_attempts: int | None = None
    timeout: float | None = None
    held: bool = False
    expires_at: datetime | None = None
    """Deadline to start by: a job still waiting then is deleted by the reconciler."""

    @classmethod
    def take(cls, kwargs: dict[str, Any], names: Iterable[str] | None = None) -> JobOptions:
        """Pop the options (those of ``names`` only, when given) out of ``kwargs``; what is
        left are the task's own arguments."""
        wanted = JOB_OPTION_NAMES if names is None else JOB_OPTION_NAMES & set(names)
        return cls(**{name: kwargs.pop(name) for name in wanted & kwargs.keys()})


#: The names of ``JobOptions``' fields.
JOB_OPTION_NAMES: frozenset[str] = frozenset(f.name for f in fields(JobOptions))


@dataclass(frozen=True, slots=True)
class NewJob:
    """A validated request to create a job; ``args_json`` is already encoded and capped."""

    task: str
    queue: str
    args_json: str
    priority: int = 0
    max_attempts: int = 3
    delay_seconds: float = 0.0
    run_at: datetime | None = None
    dedupe_key: str | None = None
    timeout_seconds: float | None = None
    held: bool = False
    expires_at: datetime | None = None
    """Deadline to start by: a job still waiting then is deleted by the reconciler."""
    dedupe_for_seconds: float | None = None
    """Keep ``dedupe_key`` taken this long after the enqueue, even once the job finished."""
    idempotency_key: str | None = None
    """A key under which the job is created at most once within ``idempotency_for_seconds``
    of its creation (the enqueue spool's; see ``store/idempotent.py``). Not for a job with a
    ``dedupe_key``, whose own rule applies."""
    idempotency_for_seconds: float | None = None
    """How long ``idempotency_key`` keeps pointing at the job."""

    @property
    def initial_state(self) -> JobState:
        """The state the job is stored in."""
        if self.held:
            return JobState.HELD
        if self.run_at is not None or self.delay_seconds > 0:
            return JobState.SCHEDULED
        return JobState.QUEUED


@dataclass(frozen=True, slots=True)
class Job:
    """One row of the ledger. ``attempt`` is the fencing token of the current claim."""

    id: int
    queue: str
    task: str
    args_json: str
    priority: int
    state: JobState
    attempt: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    dedupe_key: str | None = None
    worker_id: str | None = None
    timeout_seconds: float | None = None
    started_at: datetime | None = None
    """When the current attempt's body started; None while it waits in a worker's prefetch
    (``claimed_at`` set) or has not been claimed."""
    heartbeat_at: datetime | None = None
    lease_expires_at: datetime | None = None
    finished_at: datetime | None = None
    result_json: str | None = None
    error_json: str | None = None
    expires_at: datetime | None = None
    batch_id: int | None = None
    workflow_id: str | None = None
    """The workflow this job is a step of, if any."""
    claimed_at: datetime | None = None
    """When the current attempt was claimed (its lease and history begin here)."""
    postponed: int = 0
    """Claims that ended without running the job (each raised ``max_attempts`` too): postponed
    by a limit or an unknown task, or put back unstarted by a stopping worker."""

    @property
    def runs(self) -> int:
        """The runs of the job so far, the current one included: ``attempt`` less the claims
        that ran nothing (``postponed``). What a person is shown, and ``ctx.attempt`` (1 on
        the first run)."""
        return self.attempt - self.postponed

    @property
    def max_runs(self) -> int:
        """The runs the job may have (its ``max_attempts`` at enqueue)."""
        return self.max_attempts - self.postponed

    @property
    def waiting_to_start(self) -> bool:
        """Whether the job is claimed by a worker but its body has not started (prefetched)."""
        return self.state is JobState.RUNNING and self.started_at is None

    @property
    def hint(self) -> JobHint:
        """What the transport carries for this job."""
        return JobHint(self.id, self.queue, self.priority)

    @classmethod
    def from_row(cls, row: Mapping[Any, Any]) -> Job:
        """Build a Job from a mapping of column name to value (datetimes made aware UTC).
        On every claimed job: kept to plain lookups and one conversion per timestamp."""
        get = row.get
        run_at = _aware_utc(get("run_at"))
        created_at = _aware_utc(get("created_at"))
        batch_id = get("batch_id")
        return cls(
            id=int(row["id"]),
            queue=row["queue"],
            task=row["task"],
            args_json=row["args"],
            priority=int(row["priority"]),
            state=JobState(row["state"]),
            attempt=int(row["attempt"]),
            max_attempts=int(row["max_attempts"]),
            run_at=run_at if run_at is not None else datetime.now(UTC),
            created_at=created_at if created_at is not None else datetime.now(UTC),
            dedupe_key=get("dedupe_key"),
            worker_id=get("worker_id"),
            timeout_seconds=get("timeout_seconds"),
            started_at=_aware_utc(get("started_at")),
            heartbeat_at=_aware_utc(get("heartbeat_at")),
            lease_expires_at=_aware_utc(get("lease_expires_at")),
            finished_at=_aware_utc(get("finished_at")),
            result_json=get("result"),
            error_json=get("error"),
            expires_at=_aware_utc(get("expires_at")),
            batch_id=None if batch_id is None else int(batch_id),
            workflow_id=get("workflow_id"),
            claimed_at=_aware_utc(get("claimed_at")),
            postponed=int(get("postponed") or 0),
        )


@dataclass(frozen=True, slots=True)
class JobHint:
    """What a transport carries about a queued job: its id, and where and how urgently it
    should be claimed. Never the payload or the state: the ledger decides."""

    job_id: int
    queue: str
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Claim:
    """The fencing key of one running attempt: writes apply only while it still holds."""

    job_id: int
    attempt: int


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What an enqueue produced: the job id, and whether a duplicate already held the dedupe
    key (an unfinished job, or any job within its ``dedupe_for`` window): then ``job_id`` is
    that existing job's and nothing new was stored."""

    job_id: int
    duplicate: bool = False
