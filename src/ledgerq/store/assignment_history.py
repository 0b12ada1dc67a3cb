"""SqlAssignmentHistory: the attempts' history (``job_assignments``) as the fleet reads and
tidies it: which worker held which attempt, from when, and how it ended. The store writes
it in the transactions that end attempts (``history.py``); ``record_assignments`` (the
``WorkerStore`` port's) stores starts and ends handed to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import fleet
from ledgerq.core.job import as_utc
from ledgerq.store import moves
from ledgerq.store.dialects import closing
from ledgerq.store.history import recorded_attempts
from ledgerq.store.tables import job_assignments, jobs
from ledgerq.store.transactions import SqlTransactions

_ASSIGNMENT_RETRIES = 3


class SqlAssignmentHistory(SqlTransactions):
    """Writes, reads and cleans up ``job_assignments``. Thread-safe."""

    def record_assignments(self, events: Sequence[fleet.AssignmentEvent]) -> None:
        """Store starts and ends of attempts in one transaction; the first end wins."""
        if not events:
            return
        for attempt in range(_ASSIGNMENT_RETRIES):
            try:
                with self._begin() as conn:
                    self._write_assignments(conn, events)
                return
            except sa.exc.IntegrityError:
                # A failover inserted the same attempt between our read and our insert;
                # the next try sees its row and only fills in what is missing.
                if attempt == _ASSIGNMENT_RETRIES - 1:
                    raise

    def _write_assignments(self, conn: Connection, events: Sequence[fleet.AssignmentEvent]) -> None:
        # Batched: one executemany per kind of row, so the history costs a few statements per
        # flush, not one per job.
        merged: dict[tuple[int, int], dict[str, Any]] = {}
        for event in events:
            row = merged.setdefault(
                (event.job_id, event.attempt),
                {
                    "a_job": event.job_id,
                    "a_attempt": event.attempt,
                    "a_worker": event.worker_id,
                    "a_started": None,
                    "a_outcome": None,
                },
            )
            if event.started_at is not None:
                row["a_started"] = self.dialect.bind_time(as_utc(event.started_at))
            if event.outcome is not None and row["a_outcome"] is None:
                row["a_outcome"] = event.outcome.value
        if self.dialect.upsert_assignments(conn, list(merged.values())):
            return
        existing = recorded_attempts(conn, [k[0] for k in merged])
        fresh = [row for key, row in merged.items() if key not in existing]
        for ended in (False, True):
            rows = [r for r in fresh if (r["a_outcome"] is not None) is ended]
            if rows:
                conn.execute(self._insert_assignment(ended=ended), rows)
        ends = [
            {"a_job": r["a_job"], "a_attempt": r["a_attempt"], "a_outcome": r["a_outcome"]}
            for key, r in merged.items()
            if key in existing and r["a_outcome"] is not None
        ]
        if ends:
            conn.execute(closing(self.dialect), ends)

    def _insert_assignment(self, *, ended: bool) -> sa.Insert:
        d = self.dialect
        started = sa.bindparam("a_started", type_=job_assignments.c.started_at.type)
        return sa.insert(job_assignments).values(
            job_id=sa.bindparam("a_job"),
            attempt=sa.bindparam("a_attempt"),
            worker_id=sa.bindparam("a_worker"),
            started_at=sa.func.coalesce(started, d.now()),
            ended_at=d.now() if ended else None,
            outcome=sa.bindparam("a_outcome") if ended else None,
        )

    def close_orphaned_assignments(self) -> tuple[int, int]:
        """Close open assignments whose attempt no longer runs (outcome ``orphaned``) and
        delete assignments of jobs that no longer exist; return (closed, deleted)."""
        a = job_assignments
        still_running = sa.exists().where(moves.runs(a.c.job_id, a.c.attempt))
        gone = ~sa.exists().where(jobs.c.id == a.c.job_id)
        with self._begin() as conn:
            deleted = conn.execute(sa.delete(a).where(gone)).rowcount
            closed = conn.execute(
                sa.update(a)
                .where(a.c.ended_at.is_(None), ~still_running)
                .values(outcome=fleet.Outcome.ORPHANED.value, ended_at=self.dialect.now())
            ).rowcount
        return int(closed), int(deleted)

    def list_assignments(self, *, job_id: int | None = None) -> list[dict[str, Any]]:
        """Assignment history rows (of one job, if given), oldest first, as plain data."""
        a = job_assignments
        stmt = sa.select(*a.c).order_by(a.c.started_at, a.c.job_id, a.c.attempt)
        if job_id is not None:
            stmt = stmt.where(a.c.job_id == job_id)
        with self._read() as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]

    def outcome_counts(self) -> dict[str, dict[str, int]]:
        """Ended attempts per worker and outcome, from the assignment history."""
        a = job_assignments
        stmt = (
            sa.select(a.c.worker_id, a.c.outcome, sa.func.count())
            .where(a.c.outcome.is_not(None))
            .group_by(a.c.worker_id, a.c.outcome)
        )
        counts: dict[str, dict[str, int]] = {}
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
            for worker_id, outcome, n in rows:
                counts.setdefault(str(worker_id), {})[str(outcome)] = int(n)
        return counts
