"""Deferring a claimed job of a task the claiming worker does not know (``WorkerStore.
defer_unknown_task``): one transaction reads the database clock, the job's earlier put-backs
(kept in its ``error``) and whether an active worker of its queue declares the task
(``queue_workers.tasks``), and unless the policy buries it moves the job, fenced, back to
``scheduled`` with ``max_attempts + 1``, the same write as a rate limit's postponement:
the claim that ran nothing costs no attempt, and ``attempt`` (the fencing token) never drops.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import fleet
from ledgerq.core import unknown_tasks as unknown
from ledgerq.core.job import Claim
from ledgerq.store import moves
from ledgerq.store.history import put_back
from ledgerq.store.tables import jobs, queue_workers
from ledgerq.store.transactions import SqlTransactions, db_time


def _earlier(error_json: str | None) -> tuple[datetime | None, int]:
    """(first put-back, put-backs) recorded by earlier deferrals in the job's error."""
    try:
        error = json.loads(error_json) if error_json else None
    except ValueError:
        return None, 0
    if not isinstance(error, dict) or error.get("kind") != unknown.KIND:
        return None, 0
    try:
        since = datetime.fromisoformat(str(error["waiting_since"]))
        return db_time(since), int(error.get("put_backs", 0))
    except (KeyError, TypeError, ValueError):
        return None, 0


class SqlUnknownTaskMoves(SqlTransactions):
    """Puts back claimed jobs of tasks their worker does not know (the ``WorkerStore`` port's
    ``defer_unknown_task``). Thread-safe."""

    def defer_unknown_task(
        self, claim: Claim, *, policy: unknown.UnknownTaskPolicy
    ) -> unknown.Verdict | None:
        """Put the claimed job back to ``scheduled`` (fenced, no attempt spent) unless no
        active worker of its queue declares its task and ``policy.grace_seconds`` passed since
        its first put-back; then leave it running for the caller to bury. None if the claim is
        stale (nothing written)."""
        d = self.dialect
        fence = moves.running_attempt(claim)
        with self._begin() as conn:
            row = conn.execute(
                sa.select(jobs.c.task, jobs.c.queue, jobs.c.error, d.now().label("db_now")).where(
                    fence
                )
            ).first()
            if row is None:
                return None
            now = db_time(row.db_now)
            since, put_backs = _earlier(row.error)
            since = since or now
            waited = max((now - since).total_seconds(), 0.0)
            declared = self._declared(conn, str(row.task), str(row.queue))
            if policy.buries(declared=declared, waited_seconds=waited):
                return unknown.Verdict(False, 0.0, waited, declared, put_backs)
            delay = policy.delay_seconds(put_backs, declared=declared)
            error = {
                "kind": unknown.KIND,
                "message": f"no worker that claimed it knows task {row.task!r}; waiting for one"
                " that does",
                "waiting_since": since.isoformat(),
                "put_backs": put_backs + 1,
            }
            moved = put_back(conn, d, claim, moves.postpone(d, claim, delay, json.dumps(error)))
        if not moved:
            return None
        return unknown.Verdict(True, delay, waited, declared, put_backs + 1)

    @staticmethod
    def _declared(conn: Connection, task: str, queue: str) -> bool:
        """Whether an active worker taking ``queue`` registered ``task``."""
        rows: Any = conn.execute(
            sa.select(queue_workers.c.queues, queue_workers.c.tasks).where(
                queue_workers.c.state == fleet.WorkerState.ACTIVE.value,
                queue_workers.c.tasks.is_not(None),
            )
        ).all()
        for queues, tasks in rows:
            try:
                names = json.loads(tasks)
            except ValueError:
                continue
            if task in names and queue in queues.split(","):
                return True
        return False
