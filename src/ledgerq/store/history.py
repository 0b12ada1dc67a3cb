"""The attempts' history (``job_assignments``), written by the store in the transaction that
ends an attempt: a completion, a put-back, a postponement, a failover or the reconciler's
stuck-job reset.

An attempt's row is written when it ends (claims write none): it gets a closed row with the
worker and start read from the job before the move changed it. An open row (written by a
worker of an earlier release at its claim) is closed; a closed one keeps its first end.
The group completions' history is the driver's (``Dialect.end_assignments``, in
``dialects.py``, with ``closing``, which closes one open row): this module builds on the
driver, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import fleet
from ledgerq.core.job import Claim, as_utc
from ledgerq.core.states import JobState
from ledgerq.store.dialects import Dialect, closing
from ledgerq.store.tables import job_assignments, jobs

_a = job_assignments


@dataclass(frozen=True, slots=True)
class EndedAttempt:
    """One attempt a repair ended: its job, number, holder and start (as the job row had them)."""

    job_id: int
    attempt: int
    worker_id: str | None
    started_at: datetime | None


def recorded_attempts(conn: Connection, job_ids: Sequence[int]) -> set[tuple[int, int]]:
    """The (job id, attempt) pairs of ``job_assignments`` among these jobs."""
    stmt = sa.select(_a.c.job_id, _a.c.attempt).where(_a.c.job_id.in_(sorted(set(job_ids))))
    rows: Sequence[Any] = conn.execute(stmt).all()
    return {(int(j), int(a)) for j, a in rows}


def end_attempts(
    conn: Connection,
    dialect: Dialect,
    ended: Sequence[EndedAttempt],
    outcome: fleet.Outcome,
    *,
    close_open: bool = True,
) -> None:
    """Record ``ended`` attempts with ``outcome`` in ``conn``'s transaction. Without
    ``close_open`` an attempt that has a row already keeps it as it is."""
    if not ended:
        return
    known = recorded_attempts(conn, [e.job_id for e in ended])
    close = [e for e in ended if (e.job_id, e.attempt) in known and close_open]
    insert = [e for e in ended if (e.job_id, e.attempt) not in known]
    if close:
        keys = [{"a_job": e.job_id, "a_attempt": e.attempt} for e in close]
        conn.execute(closing(dialect), [{**key, "a_outcome": outcome.value} for key in keys])
    if insert:
        started = sa.bindparam("e_started", type_=_a.c.started_at.type)
        inserting = sa.insert(_a).values(
            job_id=sa.bindparam("e_job"),
            attempt=sa.bindparam("e_attempt"),
            worker_id=sa.bindparam("e_worker"),
            started_at=sa.func.coalesce(started, dialect.now()),
            ended_at=dialect.now(),
            outcome=outcome.value,
        )
        rows = [
            {
                "e_job": e.job_id,
                "e_attempt": e.attempt,
                "e_worker": e.worker_id or "(no worker)",
                "e_started": _bound(dialect, e.started_at),
            }
            for e in insert
        ]
        conn.execute(inserting, rows)


def held_attempts(conn: Connection, claims: Sequence[Claim]) -> dict[int, EndedAttempt]:
    """The running attempts of ``claims`` as their job rows hold them, by job id: read before
    a move that ends them clears the holder."""
    if not claims:
        return {}
    attempts = {c.job_id: c.attempt for c in claims}
    rows: Sequence[Any] = conn.execute(
        sa.select(jobs.c.id, jobs.c.attempt, jobs.c.worker_id, jobs.c.claimed_at).where(
            jobs.c.id.in_(sorted(attempts)), jobs.c.state == JobState.RUNNING.value
        )
    ).all()
    return {
        int(r.id): EndedAttempt(int(r.id), int(r.attempt), r.worker_id, r.claimed_at)
        for r in rows
        if attempts[int(r.id)] == int(r.attempt)
    }


def running_attempt_of(conn: Connection, job_id: int) -> EndedAttempt | None:
    """The attempt the job runs now, as its row holds it (None: it does not run)."""
    row = conn.execute(
        sa.select(jobs.c.attempt, jobs.c.worker_id, jobs.c.claimed_at).where(
            jobs.c.id == job_id, jobs.c.state == JobState.RUNNING.value
        )
    ).first()
    if row is None:
        return None
    return EndedAttempt(job_id, int(row.attempt), row.worker_id, row.claimed_at)


def put_back(conn: Connection, dialect: Dialect, claim: Claim, move: sa.Update) -> bool:
    """Run ``move``, a fenced put-back of ``claim``'s attempt that costs no attempt, and record
    the attempt as requeued if it applied (see ``record_put_back``)."""
    held = held_attempts(conn, [claim])
    if conn.execute(move).rowcount != 1:
        return False
    record_put_back(conn, dialect, [held[claim.job_id]] if claim.job_id in held else [])
    return True


def record_put_back(conn: Connection, dialect: Dialect, ended: Sequence[EndedAttempt]) -> None:
    """Record attempts a worker put back as requeued. An open row (its claim's, written by an
    earlier release) stays open: the put-back is not the attempt's end that row waits for,
    and the orphan cleanup or a failover closes it."""
    end_attempts(conn, dialect, ended, fleet.Outcome.REQUEUED, close_open=False)


def _bound(dialect: Dialect, value: datetime | None) -> Any:
    return None if value is None else dialect.bind_time(as_utc(value))
