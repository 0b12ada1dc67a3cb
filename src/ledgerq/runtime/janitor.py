"""Janitor: keeps the ledger's tables fit under churn, off the hot path, on its own thread."""

from __future__ import annotations

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.janitor")


class Janitor(PeriodicService):
    """Every ``interval_seconds`` asks the store to maintain its tables (the store decides
    whether anything is needed and makes sure only one worker does it at a time). Stopping
    does not wait: a maintenance run in progress finishes in the database on its own.
    A role that may not vacuum (a runtime role with DML grants only) gets one warning, then
    the janitor keeps checking quietly (the grants may change)."""

    thread_name = "ledgerq-janitor"
    logger = log
    failure_message = "table maintenance failed"
    join_seconds: float | None = None

    def __init__(self, store: JobStore, *, interval_seconds: float) -> None:
        super().__init__(interval_seconds)
        self._store = store
        self._warned = False

    def tick(self) -> None:
        """One maintenance check."""
        try:
            vacuumed = self._store.maintain_tables()
        except errors.MaintenanceNotPermitted as exc:
            if not self._warned:
                log.warning("table maintenance skipped", reason=str(exc))
                self._warned = True
            return
        if vacuumed:
            log.info("ledger tables vacuumed")
