"""SqlWorkflowStore: create, inspect, cancel, retry and resume workflows; read the event feed.

Every change takes the workflow's row lock first (see ``workflow_advance``), so it serializes
with step completions; the event feed is written in the same transactions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import errors
from ledgerq.core import workflow as wf
from ledgerq.core.job import as_utc
from ledgerq.core.states import UNFINISHED
from ledgerq.store import workflow_advance as adv
from ledgerq.store.completion_hooks import Announce
from ledgerq.store.tables import jobs, workflow_events, workflow_steps, workflows
from ledgerq.store.transactions import SqlTransactions

S = wf.StepState
W = wf.WorkflowState


class SqlWorkflowStore(SqlTransactions):
    """The WorkflowStore port over SQLAlchemy Core."""

    def __init__(self, engine: sa.Engine, announce: Announce | None = None) -> None:
        """``announce`` (optional) gets each committed change that queued jobs or emitted
        events (announce the jobs, wake feed readers)."""
        super().__init__(engine)
        self.announce = announce

    def create_workflow(self, draft: wf.WorkflowDraft, *, connection: object | None = None) -> str:
        """Store the workflow and its steps and queue the steps without dependencies, in one
        transaction (the caller's, with ``connection``); return the workflow's id."""
        d = self.dialect
        commit = wf.WorkflowCommit()
        with self._in(connection) as conn:
            conn.execute(
                sa.insert(workflows).values(
                    id=draft.id,
                    name=draft.name,
                    state=W.RUNNING.value,
                    on_failure=draft.on_failure.value,
                    steps_total=len(draft.steps),
                    steps_done=0,
                    created_at=d.now(),
                    last_progress_at=d.now(),
                )
            )
            conn.execute(
                sa.insert(workflow_steps),
                [_step_row(draft.id, i, s) for i, s in enumerate(draft.steps)],
            )
            row = adv.lock_workflows(conn, [draft.id])[0]
            adv.advance(conn, d, row, commit, progressed=True)
            if connection is not None:
                adv.after_commit(conn, self.announce, commit)
        if connection is None:
            self._announce(commit)
        return draft.id

    def get_workflow(self, workflow_id: str) -> wf.WorkflowView:
        """The workflow with its steps; raise ``WorkflowNotFound``."""
        with self._read() as conn:
            row = (
                conn.execute(sa.select(*workflows.c).where(workflows.c.id == workflow_id))
                .mappings()
                .first()
            )
            if row is None:
                raise wf.WorkflowNotFound(workflow_id)
            stmt = (
                sa.select(
                    *workflow_steps.c,
                    jobs.c.state.label("job_state"),
                    jobs.c.started_at,
                    jobs.c.finished_at,
                )
                .select_from(workflow_steps.outerjoin(jobs, jobs.c.id == workflow_steps.c.job_id))
                .where(workflow_steps.c.workflow_id == workflow_id)
                .order_by(workflow_steps.c.position)
            )
            steps = tuple(_step_view(s) for s in conn.execute(stmt).mappings())
        return _view(row, steps)

    def list_workflows(
        self, *, state: wf.WorkflowState | None = None, limit: int = 100
    ) -> list[wf.WorkflowView]:
        """Newest workflows first, optionally only those in ``state``."""
        stmt = sa.select(*workflows.c).order_by(workflows.c.created_at.desc()).limit(limit)
        if state is not None:
            stmt = stmt.where(workflows.c.state == state.value)
        with self._read() as conn:
            return [_view(r, ()) for r in conn.execute(stmt).mappings()]

    def cancel_workflow(self, workflow_id: str) -> wf.WorkflowView:
        """Cancel a running workflow: waiting steps and unfinished step jobs are cancelled
        (a running job's late completion is then refused). Raise ``InvalidTransition`` if it
        already finished."""
        with self._begin() as conn:
            row = self._locked(conn, workflow_id)
            if row["state"] != W.RUNNING.value:
                raise errors.InvalidTransition(
                    f"workflow {workflow_id} is {row['state']}: it cannot be cancelled"
                )
            steps = adv.load_steps(conn, workflow_id)
            waiting = [s["name"] for s in steps if s["state"] == S.WAITING.value]
            queued = [s for s in steps if s["state"] == S.QUEUED.value]
            unfinished = [state.value for state in UNFINISHED]
            cancelled = adv.cancel_jobs(
                conn, self.dialect, [s["job_id"] for s in queued], unfinished
            )
            names = waiting + [s["name"] for s in queued if s["job_id"] in cancelled]
            adv.set_step(conn, workflow_id, names, S.CANCELLED)
            conn.execute(
                sa.update(workflows)
                .where(workflows.c.id == workflow_id)
                .values(
                    state=W.CANCELLED.value,
                    finished_at=self.dialect.now(),
                    last_progress_at=self.dialect.now(),
                )
            )
            adv.add_event(conn, self.dialect, workflow_id, wf.WORKFLOW_FINISHED, None, None)
        self._announce(wf.WorkflowCommit({workflow_id}))
        return self.get_workflow(workflow_id)

    def retry_workflow(self, workflow_id: str) -> wf.WorkflowView:
        """Put failed and cancelled steps back to waiting and continue the workflow (their
        jobs are created anew when their dependencies have succeeded). Raise
        ``InvalidTransition`` if no step failed or was cancelled."""
        with self._begin() as conn:
            row = self._locked(conn, workflow_id)
            steps = adv.load_steps(conn, workflow_id)
            broken = wf.retry_states(wf.StepStatus(s["name"], (), S(s["state"])) for s in steps)
            if not broken:
                raise errors.InvalidTransition(
                    f"workflow {workflow_id} has no failed or cancelled step to retry"
                )
            adv.set_step(conn, workflow_id, broken, S.WAITING)
            conn.execute(
                sa.update(workflows)
                .where(workflows.c.id == workflow_id)
                .values(state=W.RUNNING.value, finished_at=None)
            )
            commit = wf.WorkflowCommit({workflow_id})
            adv.advance(
                conn, self.dialect, {**row, "state": W.RUNNING.value}, commit, progressed=True
            )
        self._announce(commit)
        return self.get_workflow(workflow_id)

    def resume_stalled(self, *, stuck_after_seconds: float, limit: int = 100) -> list[str]:
        """Repair running workflows without progress for ``stuck_after_seconds``: record step
        jobs that finished without advancing their workflow (dead by failover, cancelled by an
        operator, or a crash) and queue the steps that became ready. Return the ids of the
        workflows that were repaired."""
        cutoff = self.dialect.now_plus(sa.literal(-stuck_after_seconds, sa.Float))
        stmt = (
            sa.select(workflows.c.id)
            .where(workflows.c.state == W.RUNNING.value, workflows.c.last_progress_at < cutoff)
            .order_by(workflows.c.last_progress_at)
            .limit(limit)
        )
        with self._read() as conn:
            found: Sequence[Any] = conn.execute(stmt).scalars().all()
        candidates = [str(i) for i in found]
        return [w for w in candidates if self._resume(w)]

    def count_by_state(self) -> dict[str, int]:
        """Number of workflows per state."""
        stmt = sa.select(workflows.c.state, sa.func.count()).group_by(workflows.c.state)
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
        return {str(state): int(n) for state, n in rows}

    def purge_finished(
        self, *, succeeded_after_seconds: float, failed_after_seconds: float, limit: int
    ) -> int:
        """Delete workflows that succeeded before their retention, and failed or cancelled
        ones before theirs, with their steps and events (their jobs go by the jobs'
        retention); ``limit`` of each. Return how many workflows went."""
        d = self.dialect

        def finished_before(states: list[str], seconds: float) -> sa.ColumnElement[bool]:
            cutoff = d.now_plus(sa.literal(-float(seconds), sa.Float))
            return sa.and_(workflows.c.state.in_(states), workflows.c.finished_at < cutoff)

        conditions = (
            finished_before([W.SUCCEEDED.value], succeeded_after_seconds),
            finished_before([W.FAILED.value, W.CANCELLED.value], failed_after_seconds),
        )
        deleted = 0
        with self._begin() as conn:
            for condition in conditions:
                pick = sa.select(workflows.c.id).where(condition).limit(limit)
                found: Sequence[Any] = conn.execute(pick).scalars().all()
                ids = [str(i) for i in found]
                if not ids:
                    continue
                # Re-checked on delete: a retry may have set a workflow running again.
                gone = conn.execute(
                    sa.delete(workflows).where(workflows.c.id.in_(ids), condition)
                ).rowcount
                if gone != len(ids):
                    kept: Sequence[Any] = (
                        conn.execute(sa.select(workflows.c.id).where(workflows.c.id.in_(ids)))
                        .scalars()
                        .all()
                    )
                    still = {str(i) for i in kept}
                    ids = [i for i in ids if i not in still]
                conn.execute(sa.delete(workflow_steps).where(workflow_steps.c.workflow_id.in_(ids)))
                conn.execute(
                    sa.delete(workflow_events).where(workflow_events.c.workflow_id.in_(ids))
                )
                deleted += len(ids)
        return deleted

    def _resume(self, workflow_id: str) -> bool:
        with self._begin() as conn:
            rows = adv.lock_workflows(conn, [workflow_id])
            if not rows or rows[0]["state"] != W.RUNNING.value:
                return False
            stmt = (
                sa.select(workflow_steps.c.job_id, jobs.c.state)
                .select_from(workflow_steps.join(jobs, jobs.c.id == workflow_steps.c.job_id))
                .where(
                    workflow_steps.c.workflow_id == workflow_id,
                    workflow_steps.c.state == S.QUEUED.value,
                )
            )
            progressed = False
            finished: Sequence[Any] = conn.execute(stmt).all()
            for job_id, job_state in finished:
                outcome = wf.step_state_of(str(job_state))
                if outcome is not None:
                    progressed |= adv.record_step(
                        conn, self.dialect, workflow_id, int(job_id), outcome
                    )
            commit = wf.WorkflowCommit()
            changed = adv.advance(conn, self.dialect, rows[0], commit, progressed=progressed)
        self._announce(commit)
        return changed

    def events_after(
        self,
        cursor: int,
        *,
        workflow_id: str | None = None,
        also_ids: Sequence[int] = (),
        limit: int = 1000,
    ) -> list[wf.WorkflowEvent]:
        """Feed entries with id above ``cursor`` (and those of ``also_ids``: gaps a reader is
        still waiting for), oldest first, optionally of one workflow only."""
        e = workflow_events
        wanted = e.c.id > cursor
        if also_ids:
            wanted = sa.or_(wanted, e.c.id.in_(list(also_ids)))
        stmt = (
            sa.select(*e.c, jobs.c.result)
            .select_from(e.outerjoin(jobs, jobs.c.id == e.c.job_id))
            .where(wanted)
            .order_by(e.c.id)
            .limit(limit)
        )
        if workflow_id is not None:
            stmt = stmt.where(e.c.workflow_id == workflow_id)
        with self._read() as conn:
            return [_event(r) for r in conn.execute(stmt).mappings()]

    def _announce(self, commit: wf.WorkflowCommit) -> None:
        """Hand a committed change to ``announce`` (announce its jobs, wake feed readers)."""
        if commit and self.announce is not None:
            self.announce(commit)

    def _locked(self, conn: Connection, workflow_id: str) -> Any:
        rows = adv.lock_workflows(conn, [workflow_id])
        if not rows:
            raise wf.WorkflowNotFound(workflow_id)
        return rows[0]


def _step_row(workflow_id: str, position: int, step: wf.StepDraft) -> dict[str, Any]:
    return {
        "workflow_id": workflow_id,
        "name": step.name,
        "position": position,
        "task": step.task,
        "queue": step.queue,
        "args": step.args_json,
        "priority": step.priority,
        "max_attempts": step.max_attempts,
        "timeout_seconds": step.timeout_seconds,
        "depends_on": json.dumps(list(step.depends_on)),
        "state": S.WAITING.value,
        "job_id": None,
    }


def _when(value: Any) -> Any:
    return as_utc(value) if value is not None else None


def _view(row: Any, steps: tuple[wf.StepView, ...]) -> wf.WorkflowView:
    return wf.WorkflowView(
        id=row["id"],
        name=row["name"],
        state=W(row["state"]),
        on_failure=wf.FailurePolicy(row["on_failure"]),
        created_at=as_utc(row["created_at"]),
        last_progress_at=as_utc(row["last_progress_at"]),
        finished_at=_when(row["finished_at"]),
        steps_total=int(row["steps_total"]),
        steps_done=int(row["steps_done"]),
        steps=steps,
    )


def _step_view(row: Any) -> wf.StepView:
    return wf.StepView(
        name=row["name"],
        task=row["task"],
        depends_on=tuple(json.loads(row["depends_on"])),
        state=S(row["state"]),
        job_id=None if row["job_id"] is None else int(row["job_id"]),
        job_state=row["job_state"],
        started_at=_when(row["started_at"]),
        finished_at=_when(row["finished_at"]),
    )


def _event(row: Any) -> wf.WorkflowEvent:
    result = row["result"]
    return wf.WorkflowEvent(
        id=int(row["id"]),
        workflow_id=row["workflow_id"],
        type=row["type"],
        step=row["step"],
        job_id=None if row["job_id"] is None else int(row["job_id"]),
        created_at=as_utc(row["created_at"]),
        result=json.loads(result) if result and row["type"] == wf.STEP_COMPLETE else None,
    )
