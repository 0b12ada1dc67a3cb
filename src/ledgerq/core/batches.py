"""Batches of jobs: their callbacks, progress, and when each callback is due (pure logic).

Each callback fires at most once per batch: ``failure`` the first time a member is dead,
``success`` when every member succeeded, ``complete`` when every member finished.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from ledgerq.core import errors
from ledgerq.core.job import EnqueueResult, Job, JobHint, NewJob
from ledgerq.core.states import FINISHED, JobState


class BatchEvent(StrEnum):
    """What a batch callback reacts to."""

    SUCCESS = "success"
    FAILURE = "failure"
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True)
class Callback:
    """A task to enqueue when a batch event happens; it gets ``batch_id=`` as its argument."""

    task: str
    queue: str
    priority: int = 0
    max_attempts: int = 3
    timeout_seconds: float | None = None


def due_events(
    size: int, counts: Mapping[JobState, int], fired: set[BatchEvent]
) -> list[BatchEvent]:
    """The events whose condition holds now and that have not fired yet."""
    due: list[BatchEvent] = []
    if counts.get(JobState.DEAD, 0) > 0:
        due.append(BatchEvent.FAILURE)
    if counts.get(JobState.SUCCEEDED, 0) >= size:
        due.append(BatchEvent.SUCCESS)
    if sum(counts.get(state, 0) for state in FINISHED) >= size:
        due.append(BatchEvent.COMPLETE)
    return [event for event in due if event not in fired]


@dataclass(frozen=True, slots=True)
class BatchStatus:
    """A batch as stored: its size, members per state, and when each event fired."""

    id: int
    size: int
    created_at: datetime
    counts: Mapping[JobState, int] = field(default_factory=dict)
    fired_at: Mapping[BatchEvent, datetime | None] = field(default_factory=dict)
    callbacks: Mapping[BatchEvent, Callback] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        """Members that succeeded, died or were cancelled."""
        return sum(self.counts.get(state, 0) for state in FINISHED)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready fields."""
        return {
            "id": self.id,
            "size": self.size,
            "created_at": self.created_at.isoformat(),
            "finished": self.finished,
            "counts": {state.value: self.counts.get(state, 0) for state in JobState},
            "callbacks": {event.value: cb.task for event, cb in self.callbacks.items()},
            "fired_at": {
                event.value: (when.isoformat() if when else None)
                for event, when in self.fired_at.items()
            },
        }


class BatchNotFound(errors.StoreError):
    """No batch with the given id exists."""

    def __init__(self, batch_id: int) -> None:
        super().__init__(f"no batch with id {batch_id}")
        self.batch_id = batch_id


class BatchStore(Protocol):
    """Batches in the ledger. Callbacks are decided in the transaction that writes a member's
    final outcome (and again by the reconciler for outcomes written elsewhere)."""

    def create_batch(
        self,
        members: Sequence[NewJob],
        callbacks: Mapping[BatchEvent, Callback],
        *,
        connection: object | None = None,
        on_commit: Callable[[list[EnqueueResult]], None] | None = None,
    ) -> tuple[int, list[EnqueueResult]]:
        """Store a batch and its member jobs in one transaction (``connection``'s, if given);
        return its id and theirs. ``on_commit(results)`` runs once that committed."""

    def get_batch(self, batch_id: int) -> BatchStatus:
        """Return the batch or raise ``BatchNotFound``."""

    def list_batches(self, *, limit: int = 50) -> list[BatchStatus]:
        """The newest ``limit`` batches, newest first."""

    def list_members(self, batch_id: int, *, limit: int = 200) -> list[Job]:
        """The batch's first ``limit`` member jobs, in the order they were added; raise
        ``BatchNotFound`` if there is no such batch."""

    def retry_failed(self, batch_id: int) -> list[JobHint]:
        """Queue the batch's dead and failed members again now; return their hints."""
