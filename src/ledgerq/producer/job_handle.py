"""Waiting for a job's result: ``JobHandle`` (what ``Task.enqueue`` returns) and the wait
loop behind ``Client.wait``.

On PostgreSQL a wait is woken by the ``ledgerq_finished`` NOTIFY that each group completion
sends for the jobs it finished (a ``FinishSignal``), and re-reads the job at most every second
besides (a job finished by another path, such as a cancel, sends none). Elsewhere it reads the
job's row with a backoff from 5 ms to 200 ms between reads: a job finishing within a few
milliseconds is seen within a few more, and a long wait costs one primary-key read per 200 ms.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.job import EnqueueResult, Job
from ledgerq.core.ports import FinishSignal, JobStore
from ledgerq.core.states import JobState

#: First and longest pause between two reads of a waited-for job, in seconds.
FIRST_PAUSE = 0.005
LONGEST_PAUSE = 0.2
#: With a signal: first and longest pause between reads when no signal came.
SIGNALLED_FIRST_PAUSE = 0.05
SIGNALLED_LONGEST_PAUSE = 1.0

T = TypeVar("T")

_ENDED_WITHOUT_RESULT = frozenset({JobState.DEAD, JobState.CANCELLED})


class Waiter(Protocol):
    """What a handle waits through (the ``Client`` is one)."""

    def wait(self, job_id: int, timeout: float | None = None) -> object:
        """The job's decoded result once it succeeded."""
        ...


class JobHandle(EnqueueResult):
    """An ``EnqueueResult`` that can be waited on: ``handle.wait(timeout)``. ``job_id`` and
    ``duplicate`` are as the enqueue reported them (a duplicate's handle waits on the job
    that already held the dedupe key); it compares equal to the ``EnqueueResult`` of the
    same values."""

    __slots__ = ("_waiter",)
    _waiter: Waiter

    def __init__(self, result: EnqueueResult, waiter: Waiter) -> None:
        # The frozen fields are set here, not by the dataclass's __init__ through super():
        # a bulk enqueue builds a handle per job, and that call cost 1.6 us against 0.7 us.
        set_field = object.__setattr__
        set_field(self, "job_id", result.job_id)
        set_field(self, "duplicate", result.duplicate)
        set_field(self, "_waiter", waiter)

    def wait(self, timeout: float | None = None) -> object:
        """The job's return value (decoded from JSON) once it succeeded. Raise ``JobFailed``
        when it ended dead or cancelled, ``WaitTimeout`` (a ``TimeoutError``) when it is
        still unfinished after ``timeout`` seconds (None: wait without limit)."""
        return self._waiter.wait(self.job_id, timeout)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EnqueueResult):
            return (self.job_id, self.duplicate) == (other.job_id, other.duplicate)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.job_id, self.duplicate))

    @property
    def status(self) -> str:
        """``created`` (a new job), ``duplicate`` (a job already held the dedupe key) or
        ``spooled`` (the database was down; see ``SpooledHandle``)."""
        return "duplicate" if self.duplicate else "created"


class SpooledHandle(JobHandle):
    """The answer to an enqueue that went to the spool (``LEDGERQ_SPOOL``) because the
    database was unreachable: the job is durable in the spool and will be created exactly
    once, by its ``key``, when a drainer replays it. It has no id until then: ``job_id``
    and ``wait`` raise ``JobSpooled``, and the handle never learns it. ``key`` is the
    caller's ``dedupe_key``, or the spool's idempotency key ``spool:<producer>:<n>``, which
    ``job_dedupe_windows`` maps to the job once it exists (docs/operations.md, "Enqueue
    spool")."""

    __slots__ = ("key",)
    key: str

    def __init__(self, key: str) -> None:
        _JOB_ID_SLOT.__set__(self, 0)
        object.__setattr__(self, "duplicate", False)
        object.__setattr__(self, "key", key)

    @property
    def job_id(self) -> int:
        """No id yet: raises ``JobSpooled``."""
        raise errors.JobSpooled(
            f"the job was spooled (key {self.key!r}); it has no id until it is replayed"
        )

    def wait(self, timeout: float | None = None) -> object:
        """A spooled job cannot be waited on: raises ``JobSpooled``."""
        return self.job_id

    @property
    def status(self) -> str:
        """Always ``spooled``."""
        return "spooled"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpooledHandle):
            return self.key == other.key
        return NotImplemented

    def __hash__(self) -> int:
        return hash(("spooled", self.key))

    def __repr__(self) -> str:
        return f"SpooledHandle(key={self.key!r})"


#: The slot behind ``EnqueueResult.job_id``, which ``SpooledHandle`` hides behind a property.
_JOB_ID_SLOT = EnqueueResult.__dict__["job_id"]


def wait_for_job(
    store: JobStore,
    codec: PayloadCodec,
    job_id: int,
    timeout: float | None,
    finished: FinishSignal | None = None,
) -> object:
    """Read the job until it is final, woken early by ``finished`` when given; see
    ``JobHandle.wait``."""
    if timeout is not None and (timeout != timeout or timeout < 0):
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    deadline = None if timeout is None else time.monotonic() + timeout
    if finished is None:
        return _read_until_final(store, codec, job_id, timeout, deadline, None)
    # Listening before the first read: a completion committed after it is not missed.
    woken = finished.watch(job_id)
    try:
        return _read_until_final(store, codec, job_id, timeout, deadline, woken)
    finally:
        finished.unwatch(job_id, woken)


def _read_until_final(
    store: JobStore,
    codec: PayloadCodec,
    job_id: int,
    timeout: float | None,
    deadline: float | None,
    woken: threading.Event | None,
) -> object:
    pause, longest = FIRST_PAUSE, LONGEST_PAUSE
    if woken is not None:
        pause, longest = SIGNALLED_FIRST_PAUSE, SIGNALLED_LONGEST_PAUSE
    while True:
        if woken is not None:
            woken.clear()  # before the read: a signal after it ends the next pause
        job = store.get_job(job_id)
        if job.state is JobState.SUCCEEDED:
            return None if job.result_json is None else codec.decode(job.result_json)
        if job.state in _ENDED_WITHOUT_RESULT:
            raise _failure(job)
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                assert timeout is not None
                raise errors.WaitTimeout(f"job {job_id}", timeout, job.state.value)
            pause = min(pause, left)
        if woken is None:
            time.sleep(pause)
        else:
            woken.wait(pause)
        pause = min(pause * 2, longest)


def wait_until_final(
    read: Callable[[], T],
    describe: Callable[[T], str | None],
    what: str,
    timeout: float | None,
) -> T:
    """Call ``read`` with a backoff from 5 ms to 200 ms until ``describe`` of its value is None
    (final), and return that value; raise ``WaitTimeout`` naming ``what`` and the last
    description after ``timeout`` seconds (None: without limit). For workflows and batches."""
    if timeout is not None and (timeout != timeout or timeout < 0):
        raise ValueError(f"timeout must be None or a number of seconds >= 0, got {timeout!r}")
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = FIRST_PAUSE
    while True:
        value = read()
        unfinished = describe(value)
        if unfinished is None:
            return value
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                assert timeout is not None
                raise errors.WaitTimeout(what, timeout, unfinished)
            pause = min(pause, left)
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE)


def _failure(job: Job) -> errors.JobFailed:
    error_type = message = None
    if job.error_json:
        try:
            stored = json.loads(job.error_json)
        except ValueError:
            stored = {"message": job.error_json}
        if isinstance(stored, dict):
            error_type = _text(stored.get("type")) or _text(stored.get("kind"))
            message = _text(stored.get("message"))
    return errors.JobFailed(job.id, job.state.value, error_type, message)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
