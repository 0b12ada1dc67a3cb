"""Fenced moves of a running attempt that several stores make, spelled once: the fence on a
claim, and the put-back to ``scheduled`` that costs no attempt (a limit's postponement, a job
of a task its worker does not know)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from ledgerq.core.job import Claim
from ledgerq.core.states import JobState
from ledgerq.store.dialects import Dialect
from ledgerq.store.tables import jobs


def running_attempt(claim: Claim) -> sa.ColumnElement[bool]:
    """The fence: the job still runs ``claim``'s attempt."""
    return sa.and_(
        jobs.c.id == claim.job_id,
        jobs.c.attempt == claim.attempt,
        jobs.c.state == JobState.RUNNING.value,
    )


def postponed(dialect: Dialect, delay_seconds: float) -> dict[str, Any]:
    """Values that move a running attempt back to ``scheduled`` in ``delay_seconds`` with
    ``max_attempts + 1``, so the claim that ran nothing costs no attempt (``attempt`` is the
    fencing token and never drops)."""
    return {
        "state": JobState.SCHEDULED.value,
        "run_at": dialect.now_plus(sa.literal(float(delay_seconds), sa.Float)),
        "max_attempts": jobs.c.max_attempts + 1,
        "worker_id": None,
        "lease_expires_at": None,
    }
