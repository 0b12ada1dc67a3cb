"""Stager: moves delayed and retrying jobs whose time has come to ``queued``, on its own thread,
so the fetcher's claim path never waits for it."""

from __future__ import annotations

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore, Transport
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.stager")


class Stager(PeriodicService):
    """Every ``interval_seconds``, stages due jobs, announces them on the transport and wakes
    the fetcher if any were staged."""

    thread_name = "ledgerq-stager"
    logger = log
    failure_message = "staging due jobs failed"
    first_delay: float | None = 0.0

    def __init__(self, store: JobStore, transport: Transport, *, interval_seconds: float) -> None:
        super().__init__(interval_seconds)
        self._store = store
        self._transport = transport

    def tick(self) -> None:
        """Stage the due jobs once."""
        hints = self._store.stage_due_jobs()
        if hints:
            try:
                self._transport.push(hints)
                self._transport.interrupt()
            except errors.TransportError:
                pass  # staged in the ledger; idle workers and the reconciler find them
