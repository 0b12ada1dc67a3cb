"""Advancing workflows inside the caller's transaction: record step outcomes, queue the steps
whose dependencies all succeeded, cancel what the failure policy dooms, emit feed events.

Invariant: step rows change only while their workflow's row is locked (``lock_workflows``,
always in id order), so two sibling steps finishing at once cannot both miss their common
dependent. Jobs of other steps are only ever locked with SKIP LOCKED, so a completion (which
holds its job's row, then asks for the workflow's) never deadlocks with an advance.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import workflow as wf
from ledgerq.core.job import JobHint, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.store.completion_hooks import CompletionHook
from ledgerq.store.dialects import Dialect
from ledgerq.store.job_rows import job_values
from ledgerq.store.tables import jobs, workflow_events, workflow_steps, workflows

S = wf.StepState
#: Job states a step's job may be cancelled from without waiting for a running handler.
UNSTARTED_JOB_STATES = ("held", "scheduled", "queued", "failed")


def lock_workflows(conn: Connection, workflow_ids: Iterable[str]) -> list[Any]:
    """Lock the rows of these workflows (in id order, so lockers never deadlock) and return
    those that exist."""
    rows = []
    for workflow_id in sorted(set(workflow_ids)):
        stmt = sa.select(*workflows.c).where(workflows.c.id == workflow_id).with_for_update()
        row = conn.execute(stmt).mappings().first()
        if row is not None:
            rows.append(row)
    return rows


def load_steps(conn: Connection, workflow_id: str) -> list[Any]:
    """The step rows of a workflow, in definition order."""
    stmt = (
        sa.select(*workflow_steps.c)
        .where(workflow_steps.c.workflow_id == workflow_id)
        .order_by(workflow_steps.c.position)
    )
    return list(conn.execute(stmt).mappings())


def add_event(
    conn: Connection, d: Dialect, workflow_id: str, kind: str, step: str | None, job_id: int | None
) -> None:
    """Append one entry to the event feed (committed with the change it reports)."""
    conn.execute(
        sa.insert(workflow_events).values(
            workflow_id=workflow_id, type=kind, step=step, job_id=job_id, created_at=d.now()
        )
    )


def set_step(conn: Connection, workflow_id: str, names: Sequence[str], state: wf.StepState) -> None:
    """Move the named steps of a workflow to ``state``."""
    if names:
        conn.execute(
            sa.update(workflow_steps)
            .where(workflow_steps.c.workflow_id == workflow_id, workflow_steps.c.name.in_(names))
            .values(state=state.value)
        )


def record_step(
    conn: Connection, d: Dialect, workflow_id: str, job_id: int, outcome: wf.StepState
) -> bool:
    """Record the final outcome of a step's job (the workflow is locked); False if the job is
    not the step's current job (a stale attempt after a retry) or was recorded already."""
    step = conn.execute(
        sa.select(workflow_steps.c.name).where(
            workflow_steps.c.workflow_id == workflow_id,
            workflow_steps.c.job_id == job_id,
            workflow_steps.c.state == S.QUEUED.value,
        )
    ).scalar()
    if step is None:
        return False
    set_step(conn, workflow_id, [step], outcome)
    kind = wf.STEP_COMPLETE if outcome is S.SUCCEEDED else wf.STEP_FAILED
    add_event(conn, d, workflow_id, kind, step, job_id)
    return True


def record_completions(
    conn: Connection,
    d: Dialect,
    completions: Sequence[Completion],
    applied: Sequence[bool],
) -> wf.WorkflowCommit:
    """The completion hook: for each applied final outcome of a step, record it and advance
    its workflow, in the transaction that wrote the outcome. Returns what to announce once
    that transaction committed."""
    by_workflow: dict[str, list[tuple[int, wf.StepState]]] = {}
    for completion, ok in zip(completions, applied, strict=True):
        outcome = wf.step_state_of(completion.state.value)
        if ok and completion.workflow_id is not None and outcome is not None:
            by_workflow.setdefault(completion.workflow_id, []).append(
                (completion.claim.job_id, outcome)
            )
    commit = wf.WorkflowCommit()
    for row in lock_workflows(conn, by_workflow):
        progressed = False
        for job_id, outcome in by_workflow[row["id"]]:
            progressed |= record_step(conn, d, row["id"], job_id, outcome)
        if progressed:
            commit.workflow_ids.add(row["id"])
            advance(conn, d, row, commit, progressed=True)
    return commit


#: Workflows as a completion hook of the job store.
HOOK = CompletionHook("workflows", attrgetter("workflow_id"), record_completions)


def after_commit(
    conn: Connection,
    callback: Callable[[wf.WorkflowCommit], None] | None,
    commit: wf.WorkflowCommit,
) -> None:
    """Run ``callback(commit)`` when the caller's transaction commits (never on rollback).
    SQLAlchemy's commit event fires just before the commit itself, so a reader woken by it
    may look a moment too early and find the change at its next poll (as with enqueue)."""
    if callback is not None and commit:
        sa.event.listen(conn, "commit", lambda _conn: callback(commit), once=True)


def advance(
    conn: Connection, d: Dialect, row: Any, commit: wf.WorkflowCommit, *, progressed: bool
) -> bool:
    """Apply ``plan`` to a locked workflow; return whether anything changed."""
    workflow_id: str = row["id"]
    steps = load_steps(conn, workflow_id)
    statuses = [
        wf.StepStatus(s["name"], tuple(json.loads(s["depends_on"])), S(s["state"])) for s in steps
    ]
    decided = wf.plan(statuses, wf.FailurePolicy(row["on_failure"]), wf.WorkflowState(row["state"]))
    set_step(conn, workflow_id, decided.cancel, S.CANCELLED)
    changed = progressed or bool(decided.cancel)
    if decided.stop_unstarted:
        changed |= _cancel_unstarted(conn, d, workflow_id, steps)
    by_name = {s["name"]: s for s in steps}
    for name in decided.ready:
        commit.hints.append(_queue_step(conn, d, by_name[name], by_name))
        changed = True
    state = decided.state
    if state is not wf.WorkflowState(row["state"]) or changed:
        _update_workflow(conn, d, workflow_id, state, finished=state != row["state"])
        if state != row["state"] and state is not wf.WorkflowState.RUNNING:
            add_event(conn, d, workflow_id, wf.WORKFLOW_FINISHED, None, None)
        commit.workflow_ids.add(workflow_id)
        changed = True
    if commit.hints:
        d.notify(conn, {h.queue for h in commit.hints})
    return changed


def _update_workflow(
    conn: Connection, d: Dialect, workflow_id: str, state: wf.WorkflowState, *, finished: bool
) -> None:
    done = (
        sa.select(sa.func.count())
        .select_from(workflow_steps)
        .where(
            workflow_steps.c.workflow_id == workflow_id,
            workflow_steps.c.state.in_([s.value for s in wf.FINAL_STEPS]),
        )
        .scalar_subquery()
    )
    values: dict[str, Any] = {"state": state.value, "last_progress_at": d.now(), "steps_done": done}
    if finished:
        values["finished_at"] = None if state is wf.WorkflowState.RUNNING else d.now()
    conn.execute(sa.update(workflows).where(workflows.c.id == workflow_id).values(values))


def _cancel_unstarted(conn: Connection, d: Dialect, workflow_id: str, steps: list[Any]) -> bool:
    """``stop`` policy: cancel the jobs of queued steps that have not started. Jobs locked by
    someone else (being claimed or completed) are skipped: they run, and nothing follows."""
    job_ids = [s["job_id"] for s in steps if s["state"] == S.QUEUED.value]
    cancelled = cancel_jobs(conn, d, job_ids, UNSTARTED_JOB_STATES)
    names = [s["name"] for s in steps if s["job_id"] in cancelled]
    set_step(conn, workflow_id, names, S.CANCELLED)
    return bool(names)


def cancel_jobs(
    conn: Connection, d: Dialect, job_ids: Sequence[int], from_states: Sequence[str]
) -> set[int]:
    """Cancel those of ``job_ids`` in ``from_states`` that nobody holds locked; return them."""
    if not job_ids:
        return set()
    picked = (
        sa.select(jobs.c.id)
        .where(jobs.c.id.in_(list(job_ids)), jobs.c.state.in_(list(from_states)))
        .with_for_update(skip_locked=True)
    )
    found: Sequence[Any] = conn.execute(picked).scalars().all()
    ids = [int(i) for i in found]
    if ids:
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id.in_(ids))
            .values(state=JobState.CANCELLED.value, finished_at=d.now(), lease_expires_at=None)
        )
    return set(ids)


def _queue_step(conn: Connection, d: Dialect, step: Any, by_name: dict[str, Any]) -> JobHint:
    """Insert the job of a ready step, its dependencies' results passed as ``upstream``."""
    payload = json.loads(step["args"])
    depends_on: list[str] = json.loads(step["depends_on"])
    if depends_on:
        dep_jobs = {by_name[n]["job_id"]: n for n in depends_on}
        rows = conn.execute(
            sa.select(jobs.c.id, jobs.c.result).where(jobs.c.id.in_(list(dep_jobs)))
        ).all()
        rows_: Sequence[Any] = rows
        results = {dep_jobs[int(i)]: (json.loads(r) if r else None) for i, r in rows_}
        payload.setdefault("kwargs", {})[wf.UPSTREAM_KWARG] = {
            n: results.get(n) for n in depends_on
        }
    job = NewJob(
        task=step["task"],
        queue=step["queue"],
        args_json=json.dumps(payload, separators=(",", ":")),
        priority=step["priority"],
        max_attempts=step["max_attempts"],
        timeout_seconds=step["timeout_seconds"],
    )
    values = job_values(d, job, step["workflow_id"])
    job_id = int(conn.execute(sa.insert(jobs).values(values).returning(jobs.c.id)).scalar_one())
    conn.execute(
        sa.update(workflow_steps)
        .where(
            workflow_steps.c.workflow_id == step["workflow_id"],
            workflow_steps.c.name == step["name"],
        )
        .values(state=S.QUEUED.value, job_id=job_id)
    )
    return JobHint(job_id, step["queue"], step["priority"])
