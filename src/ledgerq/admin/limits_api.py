"""``GET /admin/queue/breakers``: the fleet's circuit breakers (read token)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from ledgerq.admin.api import ERRORS, Deps, Reader

router = APIRouter(responses=ERRORS)


class BreakerOut(BaseModel):
    """One circuit breaker, shared by every worker of the fleet."""

    name: str = Field(description="breaker:TASK or breaker:TASK[KEY].")
    state: str = Field(description="closed, half_open or open.")
    failures: int = Field(description="Consecutive failed runs counted.")
    opened_at: datetime | None
    trial_started_at: datetime | None
    updated_at: datetime | None


class BreakersOut(BaseModel):
    """Every circuit breaker with a row in the ledger."""

    breakers: list[BreakerOut]


@router.get("/admin/queue/breakers", response_model=BreakersOut, tags=["queues"])
def get_breakers(_caller: Reader, deps: Deps) -> dict[str, Any]:
    """Every circuit breaker: state (closed, half_open, open), consecutive failures, times."""
    circuits = deps.limits.list_breakers() if deps.limits is not None else []
    return {
        "breakers": [
            {
                "name": c.name,
                "state": c.state.value,
                "failures": c.failures,
                "opened_at": c.opened_at,
                "trial_started_at": c.trial_started_at,
                "updated_at": c.updated_at,
            }
            for c in circuits
        ]
    }
