"""The workflow API of an application: build a DAG of steps and enqueue it (``Workflow``),
operate on stored workflows (``Workflows``), and follow their event feed (``WorkflowEventFeed``).

The feed is read from the ledger's ``workflow_events`` table from a cursor, so no event is lost;
a ``WorkflowSignal`` (Redis pub/sub) only wakes readers early instead of at the next poll. A
feed of one workflow ends at that workflow's final event (``workflow:finished``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ledgerq.core import errors
from ledgerq.core import workflow as wf
from ledgerq.core.ports import WorkflowSignal, WorkflowStore
from ledgerq.core.producers import with_producer
from ledgerq.core.validation import check_text
from ledgerq.producer.client import Client
from ledgerq.producer.job_handle import wait_until_final

#: Seconds after which an id missing from the feed (a rolled-back or very slow writer) is no
#: longer waited for.
GAP_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class StepRef:
    """A step added to a ``Workflow``; pass it in ``after=`` of the steps that depend on it."""

    name: str


@dataclass(slots=True)
class Workflow:
    """A workflow being built: ``step`` adds steps, ``enqueue`` stores the whole DAG at once
    and queues the steps without dependencies. A step with dependencies receives their results
    as the keyword argument ``upstream`` (``{step name: result}``)."""

    client: Client
    store: WorkflowStore
    name: str
    on_failure: wf.FailurePolicy
    _steps: list[wf.StepDraft] = field(default_factory=list)
    producer: str | None = None
    """The HTTP producer that builds it: every step's job records its name (see
    ``ledgerq.core.producers``). None for workflows built in Python."""

    def step(
        self,
        call: wf.StepCall,
        *,
        after: Sequence[StepRef] = (),
        name: str | None = None,
        queue: str | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
    ) -> StepRef:
        """Add ``call`` (``task.s(...)``) as a step that runs once every step of ``after``
        succeeded; ``name`` defaults to the task's last name part (``-2``, ``-3``... on
        clashes). Raise ``InvalidJob`` on a bad request."""
        if after and wf.UPSTREAM_KWARG in call.kwargs:
            raise errors.InvalidJob(
                f"a step with dependencies receives {wf.UPSTREAM_KWARG!r}; do not pass it"
            )
        job = self.client.build(
            call.task,
            call.args,
            dict(call.kwargs),
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            timeout=timeout,
            supplied_later=(wf.UPSTREAM_KWARG,) if after else (),
        )
        step_name = name or self._free_name(call.task.rsplit(".", 1)[-1])
        args_json = job.args_json
        if self.producer is not None:
            args_json = with_producer(args_json, self.producer)
        draft = wf.StepDraft(
            name=step_name,
            task=job.task,
            queue=job.queue,
            args_json=args_json,
            depends_on=tuple(ref.name for ref in after),
            priority=job.priority,
            max_attempts=job.max_attempts,
            timeout_seconds=job.timeout_seconds,
        )
        statuses = [wf.StepStatus(s.name, s.depends_on, wf.StepState.WAITING) for s in self._steps]
        wf.check_dag([*statuses, wf.StepStatus(draft.name, draft.depends_on, wf.StepState.WAITING)])
        self._steps.append(draft)
        return StepRef(step_name)

    def _free_name(self, base: str) -> str:
        taken = {s.name for s in self._steps}
        candidate, n = base[:60], 1
        while candidate in taken:
            n += 1
            candidate = f"{base[:56]}-{n}"
        return candidate

    def enqueue(self, *, tx: object | None = None) -> str:
        """Store the workflow (inside the caller's transaction with ``tx``) and return its id."""
        draft = wf.WorkflowDraft(uuid.uuid4().hex, self.name, self.on_failure, tuple(self._steps))
        wf.check_dag(
            [wf.StepStatus(s.name, s.depends_on, wf.StepState.WAITING) for s in draft.steps]
        )
        return self.store.create_workflow(draft, connection=tx)


@dataclass(frozen=True, slots=True)
class Workflows:
    """Stored workflows: ``get``, ``list``, ``cancel``, ``retry``."""

    store: WorkflowStore

    def get(self, workflow_id: str) -> wf.WorkflowView:
        """The workflow with its steps; raise ``WorkflowNotFound``."""
        return self.store.get_workflow(_storable(workflow_id))

    def list(
        self, *, state: wf.WorkflowState | None = None, limit: int = 100
    ) -> list[wf.WorkflowView]:
        """Newest first, optionally only those in ``state``."""
        return self.store.list_workflows(state=state, limit=limit)

    def wait(self, workflow_id: str, timeout: float | None = None) -> wf.WorkflowView:
        """The workflow once it is final (``succeeded``, ``failed`` or ``cancelled``: look at
        its ``state`` and steps); raise ``WaitTimeout`` (a ``TimeoutError``) when it is still
        running after ``timeout`` seconds (None: without limit), ``WorkflowNotFound`` if there
        is none. Reads it with a backoff from 5 ms to 200 ms, as ``app.jobs.wait`` does."""
        return wait_until_final(
            lambda: self.get(workflow_id),
            lambda view: view.state.value if view.state is wf.WorkflowState.RUNNING else None,
            f"workflow {workflow_id}",
            timeout,
        )

    def cancel(self, workflow_id: str) -> wf.WorkflowView:
        """Cancel a running workflow with its unfinished steps."""
        return self.store.cancel_workflow(_storable(workflow_id))

    def retry(self, workflow_id: str) -> wf.WorkflowView:
        """Run the failed and cancelled steps again and continue."""
        return self.store.retry_workflow(_storable(workflow_id))


class WorkflowEventFeed:
    """Reads the workflow event feed from a cursor: ``poll`` once, iterate with ``events``,
    or ``subscribe`` a handler on a thread. Events of one workflow arrive in order; every
    event is delivered once per feed. Close it when done (it may hold a Redis connection)."""

    def __init__(
        self,
        store: WorkflowStore,
        *,
        workflow_id: str | None = None,
        after: int = 0,
        signal: WorkflowSignal | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        """``after``: the id of the last event already seen (0: from the start).
        ``poll_interval``: seconds between reads when no signal woke the reader."""
        self._store = store
        self.workflow_id = workflow_id
        self.cursor = after
        self._gaps: dict[int, float] = {}
        self._signal = signal
        self._poll_interval = poll_interval
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        if signal is not None:
            signal.subscribe_workflow_events(self._signalled)

    def _signalled(self, workflow_ids: list[str]) -> None:
        if self.workflow_id is None or self.workflow_id in workflow_ids:
            self._wake.set()

    def poll(self) -> list[wf.WorkflowEvent]:
        """The events committed since the last call (and late ones that filled a gap)."""
        now = time.monotonic()
        self._gaps = {i: t for i, t in self._gaps.items() if now - t < GAP_SECONDS}
        found = self._store.events_after(
            self.cursor, workflow_id=self.workflow_id, also_ids=sorted(self._gaps)
        )
        for event in found:
            self._gaps.pop(event.id, None)
            if event.id > self.cursor:
                if self.workflow_id is None:
                    # Ids are taken at insert, not commit: a smaller one may commit later.
                    self._gaps.update((i, now) for i in range(self.cursor + 1, event.id))
                self.cursor = event.id
        return found

    def events(self, *, timeout: float | None = None) -> Iterator[wf.WorkflowEvent]:
        """Yield events as they come, until ``close`` or ``timeout`` seconds pass; a feed of
        one workflow also ends after that workflow's final event (``workflow:finished``) once
        the workflow is final (a retried workflow runs on, and so does its feed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._closed.is_set():
            self._wake.clear()
            try:
                found = self.poll()
            except errors.StoreError:
                found = []  # the database is away: the cursor holds, try at the next poll
            yield from found
            if any(e.type == wf.WORKFLOW_FINISHED for e in found) and self._ended():
                return
            left = self._poll_interval if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return
            self._wake.wait(min(left, self._poll_interval))

    def _ended(self) -> bool:
        """Whether this feed's workflow is final now (never for a feed of every workflow)."""
        if self.workflow_id is None:
            return False
        try:
            state = self._store.get_workflow(self.workflow_id).state
        except errors.StoreError:
            return False  # read again at the next poll
        return state is not wf.WorkflowState.RUNNING

    def subscribe(self, handler: Callable[[wf.WorkflowEvent], None]) -> None:
        """Call ``handler(event)`` for every event from a thread of the feed, until ``close``."""

        def run() -> None:
            for event in self.events():
                handler(event)

        self._thread = threading.Thread(target=run, name="ledgerq-workflow-feed", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop iterating and subscribing; release the signal's connection."""
        self._closed.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        if self._signal is not None:
            self._signal.close()

    def __enter__(self) -> WorkflowEventFeed:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _storable(workflow_id: str) -> str:
    """``workflow_id`` if a workflow could have it; else ``WorkflowNotFound`` (an id with a
    NUL or a lone surrogate would fail in the database rather than match nothing)."""
    return check_text(
        workflow_id,
        what="workflow id",
        max_length=64,
        error=lambda _: wf.WorkflowNotFound(workflow_id),
    )
