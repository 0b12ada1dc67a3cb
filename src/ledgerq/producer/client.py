"""Client: the producer-side facade. Validates job requests, inserts them, and looks jobs up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

from ledgerq.core import errors
from ledgerq.core.bulk import HintBatch, JobBatch
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.job import (
    JOB_OPTION_NAMES,
    EnqueueResult,
    Job,
    JobHint,
    JobOptions,
    NewJob,
    check_dedupe_window,
    check_delay,
    check_queue_name,
)
from ledgerq.core.operations import EventSink, JobsEnqueued
from ledgerq.core.ports import FinishSignal, HintSender, JobStore, Transport
from ledgerq.core.requeue import DeadJobFilter, RequeueReport
from ledgerq.core.states import JobState
from ledgerq.core.tasks import TaskRegistry, TaskSpec
from ledgerq.core.validation import check_job_id, check_seconds, check_text
from ledgerq.producer.job_handle import JobHandle, SpooledHandle, wait_for_job
from ledgerq.producer.spooler import Spooler

MAX_PRIORITY = 32767
#: Job ids looked up per hint query after a bulk retry.
ANNOUNCE_CHUNK = 1000


class Client:
    """Enqueue, inspect, cancel and retry jobs. Holds no connection of its own."""

    def __init__(
        self,
        store: JobStore,
        transport: Transport,
        registry: TaskRegistry,
        codec: PayloadCodec,
        events: EventSink | None = None,
        finished: FinishSignal | None = None,
        spooler: Spooler | None = None,
        *,
        hint_sender: HintSender | None = None,
    ) -> None:
        """``events`` (optional) receives a ``JobsEnqueued`` per queue after each commit;
        ``finished`` (optional) wakes ``wait`` when a job finishes; with ``spooler`` an
        enqueue the database cannot take goes to the spool. ``hint_sender``: committed jobs'
        hints go through it (a sending thread, or writes whose replies are read later), so an
        enqueue does not wait for the transport; without, ``transport.push`` sends them
        before ``enqueue`` returns."""
        self._finished = finished
        self.store = store
        self.spooler = spooler
        self._events = events
        self._transport = transport
        self._registry = registry
        self._codec = codec
        self._sender = hint_sender
        self._unsent = 0

    @property
    def unannounced(self) -> int:
        """Hints this client could not send (their jobs wait for an idle worker's query or
        the reconciler). With a hint sender, hints still waiting for their reply are not
        counted: ``flush_hints`` first."""
        sent_later = 0 if self._sender is None else self._sender.unsent
        return self._unsent + sent_later

    def flush_hints(self, timeout: float = 2.0) -> bool:
        """Wait up to ``timeout`` seconds until the hints of every enqueue so far were sent
        (or counted in ``unannounced``); True if none is left waiting."""
        return True if self._sender is None else self._sender.flush(timeout)

    def close(self) -> None:
        """Send the hints still waiting (up to 2 s), then release the hint sender."""
        if self._sender is not None:
            self._sender.close()

    def build(
        self,
        task: str | TaskSpec,
        args: Sequence[object] = (),
        kwargs: dict[str, object] | None = None,
        options: JobOptions | None = None,
        *,
        supplied_later: Sequence[str] = (),
        **named: object,
    ) -> NewJob:
        """Validate one job request, its ``JobOptions`` given whole or by name; raise an
        ``InvalidJob`` subclass (``ArgumentsMismatch`` when the arguments do not fit the
        handler) or ``TaskNotRegistered``. ``supplied_later`` names keyword arguments the
        runtime adds (a workflow step's ``upstream``). ``dedupe_for`` keeps ``dedupe_key``
        taken for that window after the enqueue, even once the job finished (see
        docs/coordination.md)."""
        if options is None:
            unknown = named.keys() - JOB_OPTION_NAMES
            if unknown:
                raise TypeError(f"unknown job option(s): {sorted(unknown)}")
            options = JobOptions.take(dict(named))
        elif named:
            raise TypeError(f"give the options whole or by name, not both: {sorted(named)}")
        o = options
        spec = task if isinstance(task, TaskSpec) else self._registry.get(task)
        check_delay(o.delay)
        if o.priority is not None and not -MAX_PRIORITY <= o.priority <= MAX_PRIORITY:
            raise errors.InvalidJob(f"priority must lie within ±{MAX_PRIORITY}, got {o.priority}")
        if o.max_attempts is not None and o.max_attempts < 1:
            raise errors.InvalidJob(f"max_attempts must be at least 1, got {o.max_attempts}")
        if o.timeout is not None:
            check_seconds(o.timeout, what="timeout")
        if o.dedupe_key is not None:
            check_text(o.dedupe_key, what="dedupe_key", max_length=255)
        if o.run_at is not None and o.delay:
            raise errors.InvalidSchedule("give either delay or run_at, not both")
        # An empty --queue is a mistake, not "the task's queue".
        queue = check_queue_name(spec.queue if o.queue is None else o.queue)
        dedupe_for_seconds = check_dedupe_window(o.dedupe_for, o.dedupe_key)
        kwargs = kwargs or {}
        _check_call(spec, args, kwargs, supplied_later)  # the options first, then the call
        return NewJob(
            task=spec.name,
            queue=queue,
            args_json=self._codec.encode_args(tuple(args), kwargs),
            priority=spec.priority if o.priority is None else o.priority,
            max_attempts=spec.retry.max_attempts if o.max_attempts is None else o.max_attempts,
            delay_seconds=o.delay,
            run_at=o.run_at,
            dedupe_key=o.dedupe_key,
            dedupe_for_seconds=dedupe_for_seconds,
            timeout_seconds=o.timeout,
            held=o.held,
            expires_at=o.expires_at,
        )

    def build_many(
        self,
        task: str | TaskSpec,
        calls: Sequence[tuple[Sequence[object], dict[str, object]]],
        options: JobOptions,
        dedupe_keys: Sequence[str | None] | None = None,
    ) -> Sequence[NewJob]:
        """``build`` for each ``(args, kwargs)`` call with the same ``options``; the ``i``-th
        gets ``dedupe_keys[i]`` as its ``dedupe_key`` (None: none, and then no
        ``dedupe_for`` either). The options are checked once (the first job is built in
        full), each further call only for its arguments and payload: a bulk enqueue's
        per-job cost was mostly the same options checked again."""
        keys = dedupe_keys if dedupe_keys is not None else [None] * len(calls)
        if len(keys) != len(calls):
            raise errors.InvalidJob(f"{len(keys)} dedupe_keys for {len(calls)} calls")
        if any(key is not None for key in keys):
            return [
                self.build(task, args, kwargs, _keyed(options, key))
                for (args, kwargs), key in zip(calls, keys, strict=True)
            ]
        if not calls:
            return []
        spec = task if isinstance(task, TaskSpec) else self._registry.get(task)
        first = self.build(spec, calls[0][0], calls[0][1], _keyed(options, None))
        args_json = [first.args_json]
        encode, check = self._codec.encode_args, spec.check_arguments
        # Whether arguments bind to the handler depends on their count and keywords only.
        fitting = {(len(calls[0][0]), tuple(calls[0][1]))}
        for args, kwargs in calls[1:]:
            shape = (len(args), tuple(kwargs))
            if shape not in fitting:
                check(args, kwargs)
                fitting.add(shape)
            args_json.append(encode(tuple(args), kwargs))
        return JobBatch(first, args_json)

    def enqueue(self, jobs: Sequence[NewJob], *, tx: object | None = None) -> list[JobHandle]:
        """Insert ``jobs`` in one bulk write and return a handle per job (``wait`` on it for
        the result). With ``tx`` (a connection inside the caller's transaction) the jobs exist
        only if that transaction commits. Their ids go to the transport once the rows
        committed; a transport failure never fails the enqueue. With a spool
        (``LEDGERQ_SPOOL``) and no ``tx``, jobs the database cannot take are spooled and
        answered with ``SpooledHandle``s (``status == "spooled"``); a ``tx`` enqueue is
        never spooled (the caller's transaction failed too)."""

        def committed(results: list[EnqueueResult]) -> None:
            accepted = _accepted(jobs, results)
            if self._transport.carries_hints:
                self.announce(_hints(jobs, accepted))
            # Counted only once committed: inside the caller's transaction they may roll back.
            if self._events is not None:
                for queue, count in Counter(job.queue for job, _ in accepted).items():
                    self._events.emit(JobsEnqueued(queue, count))

        if self.spooler is not None and tx is None:
            return self._enqueue_spooling(self.spooler, jobs, committed)
        results = self.store.insert_jobs(jobs, connection=tx, on_commit=committed)
        return [JobHandle(result, self) for result in results]

    def _enqueue_spooling(
        self,
        spooler: Spooler,
        jobs: Sequence[NewJob],
        committed: Callable[[list[EnqueueResult]], None],
    ) -> list[JobHandle]:
        keyed = spooler.key(jobs)
        results = spooler.enqueue(
            keyed, lambda js: self.store.insert_jobs(js, on_commit=committed), self.announce
        )
        if results is None:
            return [SpooledHandle(job.idempotency_key or job.dedupe_key or "") for job in keyed]
        return [JobHandle(result, self) for result in results]

    def wait(self, job_id: int, timeout: float | None = None) -> object:
        """The job's return value (decoded from JSON) once it succeeded. Raise ``JobFailed``
        when it ended dead or cancelled, ``WaitTimeout`` (a ``TimeoutError``) when it is still
        unfinished after ``timeout`` seconds (None: without limit), ``JobNotFound`` if there
        is no such job. Wakes on the database's signal of finished jobs where there is one
        (PostgreSQL), else reads the job with a backoff from 5 ms to 200 ms."""
        return wait_for_job(self.store, self._codec, check_job_id(job_id), timeout, self._finished)

    def announce(self, hints: Sequence[JobHint]) -> None:
        """Send hints of committed queued jobs (through the hint sender, or at once);
        if the transport fails, the jobs are still in the ledger and the reconciler sends
        them later (a lost hint only costs latency)."""
        if not hints:
            return
        if self._sender is not None:
            self._sender.submit(hints)
            return
        try:
            self._transport.push(hints)
        except errors.TransportError:
            self._unsent += len(hints)

    def get(self, job_id: int) -> Job:
        """Return the job or raise ``JobNotFound``."""
        return self.store.get_job(check_job_id(job_id))

    def list(
        self,
        *,
        state: JobState | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 100,
    ) -> list[Job]:
        """Newest jobs first, filtered by every given argument (``InvalidJob`` for a filter
        no job could match: empty, control characters, invalid Unicode)."""
        for what, value in (("queue", queue), ("task", task)):
            if value is not None:
                check_text(value, what=f"{what} filter", max_length=200)
        return self.store.list_jobs(state=state, queue=queue, task=task, limit=limit)

    def cancel(self, job_id: int) -> Job:
        """Cancel a job that has not finished."""
        return self.store.cancel_job(check_job_id(job_id))

    def start(self, job_id: int) -> Job:
        """Start a held job: it is queued now (``InvalidTransition`` if it is not held)."""
        job = self.store.start_job(check_job_id(job_id))
        self.announce([job.hint])
        return job

    def retry(self, job_id: int) -> Job:
        """Run a failed, dead or cancelled job again now."""
        job = self.store.retry_job(check_job_id(job_id))
        self.announce([job.hint])
        return job

    def retry_dead(self, which: DeadJobFilter, *, dry_run: bool = False) -> RequeueReport:
        """Run every ``dead`` job ``which`` selects again now, as ``retry`` does one (see
        ``JobStore.retry_dead_jobs``: fenced, in chunks); announce those moved. With
        ``dry_run`` nothing moves and the report counts the matches."""
        if which.queue is not None:
            check_queue_name(which.queue)
        if which.task is not None:
            check_text(which.task, what="task", max_length=200)
        report = self.store.retry_dead_jobs(which, dry_run=dry_run)
        ids = report.touched_ids
        for start in range(0, len(ids), ANNOUNCE_CHUNK):
            self.announce(self.store.hints_for(ids[start : start + ANNOUNCE_CHUNK]))
        return report


def _accepted(
    jobs: Sequence[NewJob], results: list[EnqueueResult]
) -> list[tuple[NewJob, EnqueueResult]]:
    """The jobs stored (not found duplicates) beside their results. A batch's jobs are read
    from its template, which holds their queue, priority and state, so none is built."""
    if isinstance(jobs, JobBatch):
        return [(jobs.template, result) for result in results if not result.duplicate]
    return [
        (job, result) for job, result in zip(jobs, results, strict=True) if not result.duplicate
    ]


def _hints(
    jobs: Sequence[NewJob], accepted: list[tuple[NewJob, EnqueueResult]]
) -> Sequence[JobHint]:
    """The hints of the stored jobs that are queued (not held or scheduled)."""
    if isinstance(jobs, JobBatch):
        template = jobs.template
        if template.initial_state is not JobState.QUEUED:
            return []
        ids = [result.job_id for _, result in accepted]
        return HintBatch(ids, template.queue, template.priority)
    return [
        JobHint(result.job_id, job.queue, job.priority)
        for job, result in accepted
        if job.initial_state is JobState.QUEUED
    ]


def _keyed(options: JobOptions, key: str | None) -> JobOptions:
    """``options`` with ``key`` as the dedupe key; without one, no dedupe window either."""
    return replace(options, dedupe_key=key, dedupe_for=None if key is None else options.dedupe_for)


def _check_call(
    spec: TaskSpec,
    args: Sequence[object],
    kwargs: dict[str, object],
    supplied_later: Sequence[str],
) -> None:
    """``ArgumentsMismatch`` unless the handler takes these arguments plus the keywords the
    runtime will add."""
    spec.check_arguments(
        args, {**kwargs, **dict.fromkeys(supplied_later)} if supplied_later else kwargs
    )
