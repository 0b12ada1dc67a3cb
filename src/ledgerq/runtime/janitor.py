"""Janitor: keeps the ledger's tables fit under churn, off the hot path, on its own thread."""

from __future__ import annotations

import threading

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore

log = structlog.get_logger("ledgerq.janitor")


class Janitor:
    """Every ``interval_seconds`` asks the store to maintain its tables (the store decides
    whether anything is needed and makes sure only one worker does it at a time)."""

    def __init__(self, store: JobStore, *, interval_seconds: float) -> None:
        self._store = store
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledgerq-janitor", daemon=True)

    def start(self) -> None:
        """Start the periodic maintenance."""
        self._thread.start()

    def stop(self) -> None:
        """Stop; a maintenance run in progress finishes in the database on its own."""
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if self._store.maintain_tables():
                    log.info("ledger tables vacuumed")
            except errors.StoreError as exc:
                log.warning("table maintenance failed", error=str(exc))
