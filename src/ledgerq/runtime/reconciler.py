"""Reconciler: the backstop that makes a lost Redis entry, a crash between commit and push, or a
worker that vanished harmless. One pass, under a fleet-wide lock so one instance does it at a
time (every step is fenced or idempotent, so a second one would only waste work):

1. running jobs with neither heartbeat nor progress for ``stuck_after`` go back to ``queued``
   (fenced; ``dead`` when their attempts are spent);
2. ``scheduled``/retrying jobs whose time has come become ``queued``;
3. ``queued`` jobs older than ``requeue_after`` are announced again (a duplicate hint is
   harmless: the second claim fails on the state);
4. running workflows without progress for ``workflow_stuck_after`` are resumed: step jobs
   that finished without advancing their workflow are recorded, ready steps queued;
5. retention: finished jobs past their retention and never-started jobs past ``expires_at``
   are deleted, with their artifact folder if they have one;
6. batches whose members finished outside the completion path (failover, cancel) get their
   due callbacks;
7. history retention (at most every ``history.every_seconds``): old rows of the history
   tables (``core.retention``) go, one short transaction of ``history.chunk`` rows at a time.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import structlog

from ledgerq.core import errors
from ledgerq.core.job import JobHint
from ledgerq.core.operations import EventSink, ReconcilePassed
from ledgerq.core.ports import JobStore, LedgerRepair, Transport, WorkflowStore
from ledgerq.core.retention import HistoryRetention, HistoryTable
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.reconciler")

#: Unfinished batches one pass checks for due callbacks (each is locked during the pass).
BATCHES_PER_PASS = 100
#: Name of the fleet-wide lock one reconciler pass holds.
LOCK_NAME = "ledgerq.reconcile"
#: The report's count of each history table pruned.
_REPORT_FIELD = {
    HistoryTable.HEALTH_CHECKS: "pruned_health_checks",
    HistoryTable.FAILOVER_EVENTS: "pruned_failover_events",
    HistoryTable.ASSIGNMENTS: "pruned_assignments",
    HistoryTable.SCHEDULE_RUNS: "pruned_schedule_runs",
    HistoryTable.JOB_ITEMS: "pruned_job_items",
    HistoryTable.BATCHES: "pruned_batches",
}


@dataclass(frozen=True, slots=True)
class ReconcilePolicy:
    """When the reconciler runs and what it treats as stuck, lost or expired (seconds)."""

    interval_seconds: float = 15.0
    stuck_after_seconds: float = 900.0
    requeue_after_seconds: float = 60.0
    retention_succeeded_seconds: float = 7 * 86400.0
    retention_failed_seconds: float = 30 * 86400.0
    batch_limit: int = 10_000
    artifact_root: Path | None = None
    workflow_stuck_after_seconds: float = 600.0
    history: HistoryRetention = field(default_factory=HistoryRetention)


@dataclass(slots=True)
class ReconcileReport:
    """What one pass did. ``ran`` is False when another instance held the lock."""

    ran: bool = True
    stuck_requeued: int = 0
    stuck_dead: int = 0
    staged: int = 0
    announced: int = 0
    announce_failed: bool = False
    deleted_succeeded: int = 0
    deleted_failed: int = 0
    deleted_expired: int = 0
    deleted_dedupe_windows: int = 0
    deleted_workflows: int = 0
    folders_removed: int = 0
    batch_callbacks: int = 0
    workflows_resumed: int = 0
    pruned_health_checks: int = 0
    pruned_failover_events: int = 0
    pruned_assignments: int = 0
    pruned_schedule_runs: int = 0
    pruned_job_items: int = 0
    pruned_batches: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The counts, for logs and ``--json``."""
        return asdict(self)

    @property
    def changed_anything(self) -> bool:
        """Whether the pass repaired, announced or deleted something."""
        return any(v for k, v in self.as_dict().items() if k not in ("ran", "announce_failed"))


class Reconciler(PeriodicService):
    """Runs passes every ``policy.interval_seconds`` on its own thread, or one via ``run_once``."""

    thread_name = "ledgerq-reconciler"
    logger = log
    failure_message = "reconcile pass failed"
    join_seconds: float | None = 10.0

    def __init__(
        self,
        repair: LedgerRepair,
        store: JobStore,
        transport: Transport,
        policy: ReconcilePolicy,
        events: EventSink | None = None,
        workflows: WorkflowStore | None = None,
    ) -> None:
        """``workflows`` (optional): resume stalled workflows in every pass. Stopping waits for
        the current pass."""
        super().__init__(policy.interval_seconds)
        self._repair = repair
        self._workflows = workflows
        self._events = events
        self._store = store
        self._transport = transport
        self._policy = policy
        self.passes = 0
        self.last_report: ReconcileReport | None = None
        self._history_due_at = 0.0  # monotonic; the first pass prunes

    def tick(self) -> None:
        """One pass."""
        self.run_once()

    def run_once(self) -> ReconcileReport:
        """One pass under the fleet-wide lock; raise ``StoreError`` if the ledger is down."""
        p = self._policy
        report = ReconcileReport()
        with self._repair.exclusive(LOCK_NAME) as held:
            if not held:
                return ReconcileReport(ran=False)
            stuck = self._repair.reset_stuck_jobs(
                stuck_after_seconds=p.stuck_after_seconds, limit=p.batch_limit
            )
            report.stuck_requeued, report.stuck_dead = len(stuck.requeued), len(stuck.dead)
            if self._workflows is not None:
                resumed = self._workflows.resume_stalled(
                    stuck_after_seconds=p.workflow_stuck_after_seconds, limit=p.batch_limit
                )
                report.workflows_resumed = len(resumed)
            staged = self._store.stage_due_jobs(limit=p.batch_limit)
            report.staged = len(staged)
            hints: list[JobHint] = [*stuck.requeued, *staged]
            if self._transport.carries_ids():
                hints += self._repair.queued_hints(
                    waiting_seconds=p.requeue_after_seconds, limit=p.batch_limit
                )
            report.announced, report.announce_failed = self._announce(hints)
            purge = self._repair.purge_jobs(
                succeeded_after_seconds=p.retention_succeeded_seconds,
                failed_after_seconds=p.retention_failed_seconds,
                limit=p.batch_limit,
            )
            report.deleted_dedupe_windows = self._repair.purge_dedupe_windows(limit=p.batch_limit)
            report.deleted_workflows = self._purge_workflows()
            report.batch_callbacks = self._repair.advance_batches(limit=BATCHES_PER_PASS)
            if time.monotonic() >= self._history_due_at:
                self._prune_history(report)
                self._history_due_at = time.monotonic() + p.history.every_seconds
        report.deleted_succeeded = len(purge.succeeded)
        report.deleted_failed = len(purge.failed)
        report.deleted_expired = len(purge.expired)
        report.folders_removed = self._remove_folders(
            [*purge.succeeded, *purge.failed, *purge.expired]
        )
        self.passes += 1
        self.last_report = report
        if report.changed_anything or report.announce_failed:
            log.info("reconcile pass", **report.as_dict())
        if self._events is not None:
            counts = tuple(
                (k, int(v)) for k, v in report.as_dict().items() if not isinstance(v, bool)
            )
            self._events.emit(ReconcilePassed(counts))
        return report

    def _purge_workflows(self) -> int:
        """Finished workflows past the jobs' retention, ``history.chunk`` per transaction."""
        if self._workflows is None:
            return 0
        p, deleted = self._policy, 0
        for _ in range(p.history.max_chunks):
            gone = self._workflows.purge_finished(
                succeeded_after_seconds=p.retention_succeeded_seconds,
                failed_after_seconds=p.retention_failed_seconds,
                limit=p.history.chunk,
            )
            deleted += gone
            if gone == 0:
                break
        return deleted

    def _prune_history(self, report: ReconcileReport) -> None:
        """Each history table's old rows, a chunk per transaction, up to ``max_chunks``."""
        history = self._policy.history
        for table, age in history.ages().items():
            pruned = 0
            for _ in range(history.max_chunks):
                gone = self._repair.prune_history(
                    table, older_than_seconds=age, limit=history.chunk
                )
                pruned += gone
                if gone < history.chunk:
                    break
            setattr(report, _REPORT_FIELD[table], pruned)

    def _announce(self, hints: list[JobHint]) -> tuple[int, bool]:
        unique = list({h.job_id: h for h in hints}.values())
        if not unique:
            return 0, False
        try:
            self._transport.push(unique)
        except errors.TransportError as exc:
            # Workers fall back to claiming by query; the next pass tries again.
            log.warning("could not announce jobs", jobs=len(unique), error=str(exc))
            return 0, True
        return len(unique), False

    def _remove_folders(self, job_ids: list[int]) -> int:
        root = self._policy.artifact_root
        if root is None:
            return 0
        removed = 0
        for job_id in job_ids:
            folder = root / str(job_id)
            if not folder.is_dir():
                continue
            try:
                shutil.rmtree(folder)
                removed += 1
            except OSError as exc:
                log.warning("could not remove a job's folder", folder=str(folder), error=str(exc))
        return removed
