"""The attempts' history (``job_assignments``) written by repairs that end attempts which their
workers did not end: a failover and the reconciler's stuck-job reset.

An attempt may have no row yet: where completions write the history (PostgreSQL) the row is
written when the attempt ends, and elsewhere a dead worker's recorder may not have flushed its
start. Such attempts get a closed row with the worker and start read from the job before the
repair changed it; an open row is closed; a closed one keeps its first end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import fleet
from ledgerq.core.job import as_utc
from ledgerq.store.dialects import Dialect
from ledgerq.store.tables import job_assignments

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


def closing(dialect: Dialect) -> sa.Update:
    """Closes the open row of (``a_job``, ``a_attempt``) with ``a_outcome``; a closed row keeps
    its first end."""
    return (
        sa.update(_a)
        .where(
            _a.c.job_id == sa.bindparam("a_job"),
            _a.c.attempt == sa.bindparam("a_attempt"),
            _a.c.ended_at.is_(None),
        )
        .values(outcome=sa.bindparam("a_outcome"), ended_at=dialect.now())
    )


def end_attempts(
    conn: Connection, dialect: Dialect, ended: Sequence[EndedAttempt], outcome: fleet.Outcome
) -> None:
    """Record ``ended`` attempts with ``outcome`` in ``conn``'s transaction."""
    if not ended:
        return
    known = recorded_attempts(conn, [e.job_id for e in ended])
    close = [e for e in ended if (e.job_id, e.attempt) in known]
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


def _bound(dialect: Dialect, value: datetime | None) -> Any:
    return None if value is None else dialect.bind_time(as_utc(value))
