"""Stager: moves delayed and retrying jobs whose time has come to ``queued``, on its own thread,
so the fetcher's claim path never waits for it."""

from __future__ import annotations

import threading

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore, Transport

log = structlog.get_logger("ledgerq.stager")


class Stager:
    """Every ``interval_seconds``, stages due jobs, announces them on the transport and wakes
    the fetcher if any were staged."""

    def __init__(self, store: JobStore, transport: Transport, *, interval_seconds: float) -> None:
        self._store = store
        self._transport = transport
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledgerq-stager", daemon=True)

    def start(self) -> None:
        """Start staging."""
        self._thread.start()

    def stop(self) -> None:
        """Stop staging."""
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                hints = self._store.stage_due_jobs()
                if hints:
                    self._transport.push(hints)
                    self._transport.interrupt()
            except errors.StoreError as exc:
                log.warning("staging due jobs failed", error=str(exc))
            except errors.TransportError:
                pass  # staged in the ledger; idle workers and the reconciler find them
            self._stop.wait(self._interval)
