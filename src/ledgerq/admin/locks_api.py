"""``GET /admin/queue/locks``: the fleet's distributed locks as the ledger records them (read
access, like the other ``/admin/queue`` views)."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, Field

from ledgerq.admin.api import ERRORS, Deps, Reader

router = APIRouter(responses=ERRORS)


class LockOut(BaseModel):
    """One held or stale lock."""

    name: str
    owner: str
    token: int = Field(description="Fencing token: higher for every new holding.")
    acquired_at: datetime
    expires_at: datetime
    age_seconds: float
    expires_in_seconds: float = Field(description="Negative once expired.")
    owner_alive: bool = Field(
        description="An active registered worker, or for other owners an unexpired lease."
    )
    stale: bool = Field(description="Expired, or its owner worker is not active.")


class LocksOut(BaseModel):
    """Every lock with a holder on record, by name."""

    locks: list[LockOut]


@router.get("/admin/queue/locks", response_model=LocksOut, tags=["queues"])
def get_locks(_caller: Reader, deps: Deps) -> dict[str, Any]:
    """Held and stale distributed locks: owner, token, age, expiry, owner alive."""
    if deps.locks is None:
        raise HTTPException(status_code=404, detail="locks are not available on this server")
    records = deps.locks.list_locks()
    return {"locks": [{**dataclasses.asdict(r), "stale": r.stale} for r in records]}
