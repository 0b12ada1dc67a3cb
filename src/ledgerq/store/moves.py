"""The fenced moves of a running attempt, each spelled once: finish, retry, put back, bury,
requeue-or-bury and postpone. Every write is fenced on ``(id, attempt, state = 'running')``
(``runs``), so a zombie worker's late write is refused.

Each move names its source and target states and is checked against
``core.states.TRANSITIONS`` when this module is imported: a move the table does not allow fails
at import, never per job."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import fleet
from ledgerq.core.job import Claim
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState, check_transition
from ledgerq.store import workflow_advance
from ledgerq.store.dialects import Dialect
from ledgerq.store.history import EndedAttempt, end_attempts
from ledgerq.store.tables import jobs

S = JobState


@dataclass(frozen=True)
class Move:
    """A named move of a running attempt to one of ``targets``; allowed by the table."""

    name: str
    targets: frozenset[JobState]
    source: JobState = S.RUNNING

    def __post_init__(self) -> None:
        for target in self.targets:
            check_transition(self.source, target)


FINISH = Move("finish", frozenset({S.SUCCEEDED, S.DEAD, S.CANCELLED}))
RETRY = Move("retry", frozenset({S.FAILED}))
PUT_BACK = Move("put back", frozenset({S.QUEUED}))
BURY = Move("bury", frozenset({S.DEAD}))
POSTPONE = Move("postpone", frozenset({S.SCHEDULED}))


def runs(job_id: Any, attempt: Any) -> sa.ColumnElement[bool]:
    """The fence: job ``job_id`` still runs attempt ``attempt`` (values, bind parameters or
    columns of another table)."""
    return sa.and_(jobs.c.id == job_id, jobs.c.attempt == attempt, jobs.c.state == S.RUNNING.value)


def running_attempt(claim: Claim) -> sa.ColumnElement[bool]:
    """The fence: the job still runs ``claim``'s attempt."""
    return runs(claim.job_id, claim.attempt)


def claim_fence() -> sa.ColumnElement[bool]:
    """The fence on bind parameters ``claim_id`` and ``claim_attempt``, for executemany."""
    return runs(sa.bindparam("claim_id"), sa.bindparam("claim_attempt"))


def finish(d: Dialect) -> sa.Update:
    """FINISH of ``claim_fence()`` to ``new_state`` with ``new_result`` and ``new_error``."""
    return (
        sa.update(jobs)
        .where(claim_fence())
        .values(
            state=sa.bindparam("new_state"),
            result=sa.bindparam("new_result"),
            error=sa.bindparam("new_error"),
            finished_at=d.now(),
            lease_expires_at=None,
            started_at=_real_start(d),
        )
    )


def retry(d: Dialect) -> sa.Update:
    """RETRY of ``claim_fence()``: ``failed`` with ``new_error``, due in ``retry_delay`` s."""
    (target,) = RETRY.targets
    return (
        sa.update(jobs)
        .where(claim_fence())
        .values(
            state=target.value,
            error=sa.bindparam("new_error"),
            run_at=d.now_plus(sa.bindparam("retry_delay", type_=sa.Float)),
            lease_expires_at=None,
            started_at=_real_start(d),
        )
    )


def put_back(
    fence: sa.ColumnElement[bool], unstarted: sa.ColumnElement[int] | None = None
) -> sa.Update:
    """PUT_BACK: back to ``queued`` with its attempt (so the lost owner stays fenced out).
    With ``unstarted`` (1 for an attempt whose body never started, else 0) such an attempt
    costs nothing, as POSTPONE counts it: ``max_attempts`` and ``postponed`` go up by it."""
    (target,) = PUT_BACK.targets
    values: dict[str, Any] = {"state": target.value, "worker_id": None, "lease_expires_at": None}
    if unstarted is not None:
        values["max_attempts"] = jobs.c.max_attempts + unstarted
        values["postponed"] = jobs.c.postponed + unstarted
    return sa.update(jobs).where(fence).values(values)


def postpone(d: Dialect, claim: Claim, delay_seconds: float, error: str | None = None) -> sa.Update:
    """POSTPONE of ``claim``: back to ``scheduled`` in ``delay_seconds`` with
    ``max_attempts + 1``, so the claim that ran nothing costs no attempt (``attempt`` is the
    fencing token and never drops), and ``postponed + 1``, so the runs shown
    (``Job.runs``: ``attempt - postponed``) count real runs only; ``error`` (JSON), when
    given, says why."""
    (target,) = POSTPONE.targets
    values: dict[str, Any] = {
        "state": target.value,
        "run_at": d.now_plus(sa.literal(float(delay_seconds), sa.Float)),
        "max_attempts": jobs.c.max_attempts + 1,
        "postponed": jobs.c.postponed + 1,
        "worker_id": None,
        "lease_expires_at": None,
    }
    if error is not None:
        values["error"] = error
    return sa.update(jobs).where(running_attempt(claim)).values(values)


def _bury(d: Dialect, fence: sa.ColumnElement[bool]) -> sa.Update:
    (target,) = BURY.targets
    return (
        sa.update(jobs)
        .where(fence)
        .values(
            state=target.value,
            finished_at=d.now(),
            lease_expires_at=None,
            error=sa.bindparam("new_error"),
        )
    )


def _real_start(d: Dialect) -> sa.ColumnElement[Any]:
    """An attempt's body start as its outcome is written: a start mark's, else now less how
    long the body ran (``ran_s``), else (not known) the claim's time."""
    ran = sa.cast(sa.bindparam("ran_s", type_=sa.Float), sa.Float)
    body_start = sa.case((ran.is_(None), None), else_=d.now_plus(-ran))
    return sa.func.coalesce(jobs.c.started_at, body_start, jobs.c.claimed_at)


def running_rows(which: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The rows ``requeue_or_bury`` needs of the running jobs ``which`` selects, in id order."""
    started = sa.func.coalesce(jobs.c.claimed_at, jobs.c.started_at).label("started_at")
    columns = (jobs.c.id, jobs.c.attempt, jobs.c.max_attempts, jobs.c.queue, jobs.c.priority)
    return (
        sa.select(*columns, jobs.c.worker_id, started, jobs.c.workflow_id, jobs.c.postponed)
        .where(which)
        .order_by(jobs.c.id)
    )


@dataclass(frozen=True)
class Lost:
    """Why attempts are taken from their holders: the error ``kind`` and ``message`` a buried
    job keeps, the history ``outcome``, and a condition re-checked on each fenced write."""

    kind: str
    message: str
    outcome: fleet.Outcome
    still: sa.ColumnElement[bool] | None = None


def requeue_or_bury(
    conn: Connection, d: Dialect, rows: Sequence[Any], lost: Lost
) -> tuple[list[Any], list[Any]]:
    """REQUEUE-OR-BURY of ``rows`` (from ``running_rows``), fenced: back to ``queued`` with
    attempts left, else ``dead``; the attempts' history is closed, a buried workflow step fails
    its step in this transaction and the queues with requeued jobs are woken. Returns the rows
    (requeued, buried) whose write applied."""
    fence = runs(sa.bindparam("f_id"), sa.bindparam("f_attempt"))
    if lost.still is not None:
        fence = sa.and_(fence, lost.still)
    groups: dict[bool, list[Any]] = defaultdict(list)
    for row in rows:
        groups[row.attempt >= row.max_attempts].append(row)
    moved: dict[bool, list[Any]] = {}
    for exhausted, stmt in ((False, put_back(fence)), (True, _bury(d, fence))):
        params = [_params(r, lost) if exhausted else _params(r) for r in groups[exhausted]]
        applied = d.update_many(conn, stmt, params) if params else []
        moved[exhausted] = [r for r, ok in zip(groups[exhausted], applied, strict=True) if ok]
    requeued, dead = moved[False], moved[True]
    ended = [
        EndedAttempt(int(r.id), int(r.attempt), r.worker_id, r.started_at)
        for r in sorted(requeued + dead, key=lambda r: int(r.id))
    ]
    end_attempts(conn, d, ended, lost.outcome)
    # A workflow step that died here fails its step now (its dependents are cancelled or the
    # workflow fails by its policy) instead of waiting for the reconciler's
    # WORKFLOW_STUCK_AFTER. Steps its policy queues are found by polling or the re-send.
    steps = [
        Completion(Claim(int(r.id), int(r.attempt)), S.DEAD, workflow_id=str(r.workflow_id))
        for r in dead
        if r.workflow_id is not None
    ]
    if steps:
        workflow_advance.record_completions(conn, d, steps, [True] * len(steps))
    if requeued:
        d.notify(conn, {r.queue for r in requeued})
    return requeued, dead


def _params(row: Any, lost: Lost | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"f_id": row.id, "f_attempt": row.attempt}
    if lost is not None:
        runs = int(row.attempt) - int(row.postponed)  # as Job.runs: postponed claims aside
        error = {"kind": lost.kind, "message": lost.message, "attempt": runs}
        params["new_error"] = json.dumps(error)
    return params
