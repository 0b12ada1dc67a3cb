"""The ports of fleet-wide limits and of workflows, as Protocols (the rest of the ports are in
``core/ports.py``, which re-exports these)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ledgerq.core import limits, workflow
from ledgerq.core.job import Claim

# -- fleet-wide limits (see core/limits.py) ---------------------------------------------------


class RateLimitBackend(Protocol):
    """Shared rate schedules, one per name (Redis or the database): every client of one
    backend shares them."""

    def acquire_rate(self, *, name: str, rate: limits.Rate) -> limits.RateDecision:
        """Admit one use of ``name`` under ``rate`` (GCRA, see ``core.limits.Rate``: uses
        spaced ``period / limit`` apart, up to ``burst`` at once after a quiet spell); else
        deny with the seconds until one frees up (at most one interval)."""


class LimitStore(Protocol):
    """Concurrency slots, circuit breakers and the postponing of gated jobs, in the ledger."""

    def acquire_slot(self, *, name: str, limit: int, claim: Claim) -> bool:
        """Take one of ``limit`` slots of ``name`` for this attempt; slots of attempts that
        are no longer running are freed first, so a dead worker's slots come back."""

    def release_slot(self, *, name: str, claim: Claim) -> None:
        """Give back this attempt's slot of ``name`` (no error if it holds none)."""

    def admit_breaker(
        self, *, name: str, breaker: limits.Breaker
    ) -> tuple[limits.Admission, float]:
        """Ask the breaker ``name`` whether a run may go (taking the half-open trial if due);
        with ``wait``, also the seconds until the next trial."""

    def record_breaker(
        self, *, name: str, breaker: limits.Breaker, succeeded: bool
    ) -> limits.Circuit:
        """Count one run's outcome in the breaker ``name``; return its new state."""

    def list_breakers(self) -> list[limits.Circuit]:
        """Every breaker that has a row, by name."""

    def reset_breaker(self, name: str) -> bool:
        """Close the breaker ``name`` and clear its count; False if there is no such breaker."""

    def postpone_job(self, claim: Claim, *, delay_seconds: float) -> bool:
        """Put a running attempt that a limit held back to ``scheduled`` in ``delay_seconds``
        without spending an attempt (``max_attempts`` grows by one in the same fenced write,
        since ``attempt``, the fencing token, never goes down). False if the claim is stale."""


# -- workflows (see core/workflow.py) ---------------------------------------------------------


class WorkflowStore(Protocol):
    """Workflows in the ledger: created whole, advanced by step completions (inside
    ``JobStore.complete_jobs``), inspected, cancelled, retried and resumed."""

    def create_workflow(
        self, draft: workflow.WorkflowDraft, *, connection: object | None = None
    ) -> str:
        """Store the workflow and queue its steps without dependencies; return its id."""

    def get_workflow(self, workflow_id: str) -> workflow.WorkflowView:
        """The workflow with its steps; raise ``WorkflowNotFound``."""

    def list_workflows(
        self, *, state: workflow.WorkflowState | None = None, limit: int = 100
    ) -> list[workflow.WorkflowView]:
        """Newest workflows first, optionally only those in ``state``."""

    def cancel_workflow(self, workflow_id: str) -> workflow.WorkflowView:
        """Cancel a running workflow and its unfinished steps (their late completions are
        refused); raise ``InvalidTransition`` if it finished (``WorkflowNotFound`` if there
        is no such workflow)."""

    def retry_workflow(self, workflow_id: str) -> workflow.WorkflowView:
        """Run failed and cancelled steps again and continue the workflow; raise
        ``InvalidTransition`` if no step failed or was cancelled."""

    def resume_stalled(self, *, stuck_after_seconds: float, limit: int = 100) -> list[str]:
        """Repair running workflows without progress for that long; return those repaired."""

    def purge_finished(
        self, *, succeeded_after_seconds: float, failed_after_seconds: float, limit: int
    ) -> int:
        """Delete finished workflows past their retention, with their steps and events."""

    def events_after(
        self,
        cursor: int,
        *,
        workflow_id: str | None = None,
        also_ids: Sequence[int] = (),
        limit: int = 1000,
    ) -> list[workflow.WorkflowEvent]:
        """Feed entries with id above ``cursor`` (plus ``also_ids``), oldest first."""


class WorkflowSignal(Protocol):
    """A fast lane that tells event-feed readers which workflows have new events. The feed
    table stays the record: a lost signal costs a poll interval, never an event."""

    def publish_workflow_events(self, workflow_ids: Sequence[str]) -> None:
        """Signal new events of these workflows; raise ``TransportError`` on failure."""

    def subscribe_workflow_events(self, handler: Callable[[list[str]], None]) -> None:
        """Call ``handler(workflow_ids)`` for every signal, from a thread of its own, until
        ``close``. Subscribing starts in the background: signals sent before it listens are
        lost (readers poll the feed as well)."""

    def close(self) -> None:
        """Stop listening and release connections."""
