"""The producer side of batches: ``app.batch(...)`` builds a batch of jobs with callbacks and
stores it in one transaction; ``app.batches`` looks batches up and retries their failures."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Protocol

from ledgerq.core import errors
from ledgerq.core.batches import BatchEvent, BatchNotFound, BatchStatus, BatchStore, Callback
from ledgerq.core.job import EnqueueResult, Job, JobHint, JobOptions, NewJob
from ledgerq.core.states import JobState
from ledgerq.core.tasks import TaskSpec
from ledgerq.core.validation import MAX_JOB_ID
from ledgerq.producer.job_handle import wait_until_final

#: The ``JobOptions`` a batch member takes (``Batch.add``); its other keyword arguments are
#: task arguments.
MEMBER_OPTIONS = frozenset({"queue", "priority", "delay", "max_attempts", "timeout"})


class HasSpec(Protocol):
    """A registered task (``Task``): anything carrying its ``TaskSpec``."""

    @property
    def spec(self) -> TaskSpec:
        """The task's registration."""


TaskRef = str | TaskSpec | HasSpec

#: One job of ``app.batch(calls)``: ``(task, args)`` or ``(task, args, kwargs)``.
BatchCall = (
    tuple[TaskRef, Sequence[object]] | tuple[TaskRef, Sequence[object], Mapping[str, object]]
)
Build = Callable[..., NewJob]
Announce = Callable[[Sequence[JobHint]], None]


def name_or_spec(task: TaskRef) -> str | TaskSpec:
    """A task name or spec as ``Client.build`` takes it."""
    return task if isinstance(task, str | TaskSpec) else task.spec


class Batch:
    """A batch being assembled: ``add`` jobs, then ``enqueue`` (or leave the ``with`` block).

    The batch and its jobs are stored in one transaction (``tx``'s when given); ``id`` and
    ``job_ids`` are set once it is. Callbacks get ``batch_id=<id>`` as their only argument.
    """

    def __init__(
        self,
        store: BatchStore,
        build: Build,
        announce: Announce,
        callbacks: dict[BatchEvent, Callback],
        resolve: Callable[[str], TaskSpec],
    ) -> None:
        self._store = store
        self._resolve = resolve
        self._build = build
        self._announce = announce
        self._callbacks = callbacks
        self._members: list[NewJob] = []
        self.id: int | None = None
        self.job_ids: list[int] = []

    def add(self, task: TaskRef, *args: object, **kwargs: object) -> Batch:
        """Add one job of ``task`` with these arguments; ``queue``, ``priority``, ``delay``,
        ``max_attempts`` and ``timeout`` are job options unless the handler has a parameter
        of that name. Raise ``InvalidJob`` (``ArgumentsMismatch`` for arguments the handler
        does not take) at once."""
        if self.id is not None:
            raise errors.InvalidJob(f"batch {self.id} is already enqueued")
        found = name_or_spec(task)
        spec = self._resolve(found) if isinstance(found, str) else found
        options = JobOptions.take(
            kwargs, [name for name in MEMBER_OPTIONS if not spec.takes_keyword(name)]
        )
        self._members.append(self._build(spec, args, kwargs, options))
        return self

    def add_job(self, job: NewJob) -> Batch:
        """Add a job already built by ``Client.build`` (the HTTP API builds its members so,
        with their options given apart from their arguments)."""
        if self.id is not None:
            raise errors.InvalidJob(f"batch {self.id} is already enqueued")
        self._members.append(job)
        return self

    def enqueue(self, *, tx: object | None = None) -> int:
        """Store the batch and its jobs; return the batch id. ``InvalidJob`` if it is empty."""
        if self.id is not None:
            raise errors.InvalidJob(f"batch {self.id} is already enqueued")
        members = self._members

        def committed(results: list[EnqueueResult]) -> None:
            self._announce(
                [
                    JobHint(r.job_id, job.queue, job.priority)
                    for job, r in zip(members, results, strict=True)
                    if job.initial_state is JobState.QUEUED
                ]
            )

        self.id, results = self._store.create_batch(
            members, self._callbacks, connection=tx, on_commit=committed
        )
        self.job_ids = [r.job_id for r in results]
        return self.id

    def wait(self, timeout: float | None = None) -> BatchStatus:
        """The stored batch once every member finished (see ``BatchClient.wait``)."""
        if self.id is None:
            raise errors.InvalidJob("the batch is not enqueued yet")
        return wait_for_batch(self._store, self.id, timeout)

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.enqueue()


class BatchClient:
    """Make, inspect and retry batches (``app.batches``)."""

    def __init__(
        self,
        store: BatchStore,
        build: Build,
        announce: Announce,
        resolve: Callable[[str], TaskSpec],
    ) -> None:
        self._store = store
        self._build = build
        self._announce = announce
        self._resolve = resolve

    def new(
        self,
        *,
        on_success: TaskRef | None = None,
        on_failure: TaskRef | None = None,
        on_complete: TaskRef | None = None,
    ) -> Batch:
        """An empty batch with these callbacks (each may be None)."""
        wanted = {
            BatchEvent.SUCCESS: on_success,
            BatchEvent.FAILURE: on_failure,
            BatchEvent.COMPLETE: on_complete,
        }
        callbacks = {
            event: self._callback(task) for event, task in wanted.items() if task is not None
        }
        return Batch(self._store, self._build, self._announce, callbacks, self._resolve)

    def _callback(self, task: TaskRef) -> Callback:
        found = name_or_spec(task)
        spec = self._resolve(found) if isinstance(found, str) else found
        try:
            spec.check_arguments((), {"batch_id": 0})
        except errors.ArgumentsMismatch as exc:
            raise errors.InvalidJob(
                f"a batch callback is called with batch_id only: {exc}"
            ) from None
        return Callback(
            task=spec.name,
            queue=spec.queue,
            priority=spec.priority,
            max_attempts=spec.retry.max_attempts,
            timeout_seconds=spec.timeout_seconds,
        )

    def enqueue(
        self, calls: Iterable[BatchCall], batch: Batch, *, tx: object | None = None
    ) -> Batch:
        """Add ``(task, args)`` or ``(task, args, kwargs)`` calls to ``batch`` and store it."""
        for call in calls:
            if not 2 <= len(call) <= 3:
                raise errors.InvalidJob("a batch call is (task, args) or (task, args, kwargs)")
            task, args, *rest = call
            kwargs: Mapping[str, object] = rest[0] if rest else {}
            batch.add(task, *args, **kwargs)
        batch.enqueue(tx=tx)
        return batch

    def get(self, batch_id: int) -> BatchStatus:
        """The batch and its members per state; ``BatchNotFound`` if unknown."""
        return self._store.get_batch(_storable(batch_id))

    def list(self, *, limit: int = 50) -> builtins.list[BatchStatus]:
        """The newest ``limit`` batches (1 to 1000), newest first, members per state."""
        if not 1 <= limit <= 1000:
            raise errors.InvalidJob(f"limit must be 1 to 1000, got {limit}")
        return self._store.list_batches(limit=limit)

    def members(self, batch_id: int, *, limit: int = 200) -> builtins.list[Job]:
        """The batch's first ``limit`` member jobs in the order they were added;
        ``BatchNotFound`` if unknown."""
        return self._store.list_members(_storable(batch_id), limit=limit)

    def wait(self, batch_id: int, timeout: float | None = None) -> BatchStatus:
        """The batch once every member finished (succeeded, dead or cancelled: look at its
        ``counts``; a member's failure does not raise) and its callbacks were queued; raise
        ``WaitTimeout`` (a ``TimeoutError``) after ``timeout`` seconds (None: without limit).
        Reads it with a backoff from 5 ms to 200 ms."""
        return wait_for_batch(self._store, _storable(batch_id), timeout)

    def retry_failed(self, batch_id: int) -> builtins.list[int]:
        """Queue the batch's dead and failed members again now; return their ids."""
        hints = self._store.retry_failed(_storable(batch_id))
        self._announce(hints)
        return [h.job_id for h in hints]


def wait_for_batch(store: BatchStore, batch_id: int, timeout: float | None) -> BatchStatus:
    """Read the batch until every member finished."""

    def unfinished(status: BatchStatus) -> str | None:
        if status.finished >= status.size:
            return None
        return f"unfinished ({status.finished} of {status.size} members finished)"

    return wait_until_final(
        lambda: store.get_batch(batch_id), unfinished, f"batch {batch_id}", timeout
    )


def _storable(batch_id: int) -> int:
    """``batch_id`` if a batch could have it; else ``BatchNotFound`` (ids are BIGINTs)."""
    if isinstance(batch_id, bool) or not isinstance(batch_id, int):
        raise BatchNotFound(batch_id)
    if not 0 < batch_id <= MAX_JOB_ID:
        raise BatchNotFound(batch_id)
    return batch_id
