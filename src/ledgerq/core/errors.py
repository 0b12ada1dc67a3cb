"""The ledgerq error tree; every error ledgerq raises descends from ``LedgerqError``.

LedgerqError
├── ConfigError            settings that cannot work (bad URL, unknown key, bad value)
├── StoreError
│   ├── StoreUnavailable   the database cannot be reached
│   │   └── SpoolUnavailable  ... and the enqueue spool could not take the jobs either
│   ├── SpoolCorrupt       a spool entry cannot be read (written by another version?)
│   ├── JobNotFound        no job with that id
│   ├── StaleClaim         a fenced write of a job this worker no longer owns
│   ├── InvalidTransition  the job's state does not allow the requested move
│   └── MaintenanceNotPermitted  the role may not vacuum the ledger's tables (not their owner)
├── TransportError         the transport (e.g. Redis) failed; the worker degrades to polling
├── LeaseLost              a lock or lease expired while held
├── LockUnavailable        a lock could not be taken within the wait asked for
├── InvalidLock            a bad lock name or TTL
├── TaskNotRegistered      no task of that name in the application's registry
├── AppNotFound            ``--app module:attribute`` does not name a LedgerQ application
├── JobSpooled           a spooled enqueue has no job id until its replay
├── JobFailed              a waited-for job ended dead or cancelled (carries its error)
├── WaitTimeout            a wait for a job or workflow outlasted its timeout (a TimeoutError)
└── InvalidJob             a job request was rejected before anything was stored
    ├── PayloadError       arguments are not JSON, too large or too deep
    ├── InvalidQueueName   the queue name breaks the naming rule
    └── InvalidSchedule    negative or absurd delay / run_at
"""

from __future__ import annotations


class LedgerqError(Exception):
    """Root of every error ledgerq raises on purpose."""


class ConfigError(LedgerqError):
    """Settings that cannot work; raised once, at start."""


class StoreError(LedgerqError):
    """The job store failed or refused an operation."""


class StoreUnavailable(StoreError):
    """The database could not be reached or answered with an operational error."""


class SpoolUnavailable(StoreUnavailable):
    """The database could not be reached and the enqueue spool could not keep the jobs:
    nothing was stored."""


class SpoolCorrupt(StoreError):
    """A spool entry cannot be read; it stays in the spool for an operator to look at."""


class JobNotFound(StoreError):
    """No job with the given id exists."""

    def __init__(self, job_id: int) -> None:
        super().__init__(f"no job with id {job_id}")
        self.job_id = job_id


class StaleClaim(StoreError):
    """A fenced write was refused: the worker no longer owns this attempt of the job."""


class InvalidTransition(StoreError):
    """The job's current state does not allow the requested operation."""


class MaintenanceNotPermitted(StoreError):
    """The database role may not maintain (vacuum) the ledger's tables: it does not own them.
    A runtime role with DML grants only (docs/operations.md) gets this; the janitor skips."""


class TransportError(LedgerqError):
    """The transport failed; correctness never depends on it."""


class LeaseLost(LedgerqError):
    """A lease or lock expired or was taken over while held."""


class LockUnavailable(LedgerqError):
    """Another holder kept the lock for the whole wait that was asked for."""


class TaskNotRegistered(LedgerqError):
    """No task of that name is registered with the application."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown task {name!r}: it is not registered with this application")
        self.name = name


class AppNotFound(LedgerqError):
    """The ``--app`` / ``LEDGERQ_APP`` reference does not resolve to an application."""


class JobFailed(LedgerqError):
    """A job that was waited for ended without a result: ``dead`` (its attempts spent or
    buried) or ``cancelled``. ``error_type`` and ``error_message`` are the stored error's
    (the exception's class name and message of the last attempt), None when none was stored
    (a job cancelled before it ran)."""

    def __init__(
        self,
        job_id: int,
        state: str,
        error_type: str | None = None,
        error_message: str | None = None,
    ) -> None:
        detail = error_message or error_type or "no error recorded"
        super().__init__(f"job {job_id} ended {state}: {detail}")
        self.job_id = job_id
        self.state = state
        self.error_type = error_type
        self.error_message = error_message


class JobSpooled(LedgerqError):
    """The job was spooled (the database was unreachable): it has no id until the spool
    drainer replays it, so there is nothing to look up or wait on yet."""


class WaitTimeout(LedgerqError, TimeoutError):
    """A wait for a job (or a workflow) outlasted its timeout; the job is left as it is."""

    def __init__(self, what: str, timeout: float, state: str) -> None:
        super().__init__(f"{what} still {state} after waiting {timeout:g} s")
        self.timeout = timeout
        self.state = state


class InvalidJob(LedgerqError):
    """A job request was rejected before anything was stored."""


class ArgumentsMismatch(InvalidJob, TypeError):
    """A job's arguments do not fit its handler's signature; nothing was stored."""


class PayloadError(InvalidJob):
    """Job arguments are not JSON-serialisable, too large, or nested too deep."""


class InvalidQueueName(InvalidJob):
    """A queue name that breaks the naming rule."""


class InvalidSchedule(InvalidJob):
    """A negative or absurd delay, or an unusable run_at."""


class InvalidLock(LedgerqError):
    """A lock name or TTL that cannot work."""
