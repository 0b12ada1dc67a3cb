"""Retention of the history tables: which tables the reconciler prunes, how old a row must be,
and the chunking that keeps every delete short. What may never go (an unfinished batch, the
items of a job that still exists, the newest run a schedule's overlap check reads) is the
store's rule, spelled in its conditions."""

from __future__ import annotations

import enum
from dataclasses import dataclass

DAY = 86400.0


class HistoryTable(enum.StrEnum):
    """A history table the reconciler prunes, with the age its rows are measured by."""

    HEALTH_CHECKS = "worker_health_checks"
    """Health records, by ``checked_at``."""
    FAILOVER_EVENTS = "failover_events"
    """The failover record, by ``detected_at``."""
    ASSIGNMENTS = "job_assignments"
    """Ended attempts, by ``ended_at`` (an attempt still running is never pruned)."""
    SCHEDULE_RUNS = "schedule_runs"
    """Fired ticks, by ``created_at``; a schedule's newest run with a job stays (its overlap
    check reads it)."""
    JOB_ITEMS = "job_items"
    """Finished batch items, by ``finished_at``, of jobs that no longer exist only."""
    BATCHES = "batches"
    """Batches whose completion fired, by ``complete_fired_at``, with no unfinished member."""


@dataclass(frozen=True, slots=True)
class HistoryRetention:
    """How long each history table keeps its rows (seconds), and how the reconciler prunes:
    ``chunk`` rows per transaction, at most ``max_chunks`` per table and pass, a pass at most
    every ``every_seconds`` (a table without an index on its age is scanned by each pass)."""

    health_checks_seconds: float = 7 * DAY
    failover_events_seconds: float = 30 * DAY
    assignments_seconds: float = 30 * DAY
    schedule_runs_seconds: float = 30 * DAY
    job_items_seconds: float = 7 * DAY
    batches_seconds: float = 30 * DAY
    chunk: int = 1000
    max_chunks: int = 20
    every_seconds: float = 300.0

    def ages(self) -> dict[HistoryTable, float]:
        """Each table's retention in seconds."""
        t = HistoryTable
        return {
            t.HEALTH_CHECKS: self.health_checks_seconds,
            t.FAILOVER_EVENTS: self.failover_events_seconds,
            t.ASSIGNMENTS: self.assignments_seconds,
            t.SCHEDULE_RUNS: self.schedule_runs_seconds,
            t.JOB_ITEMS: self.job_items_seconds,
            t.BATCHES: self.batches_seconds,
        }
