"""Recorder: writes the history of which worker held which attempt (``job_assignments``) in
groups from its own thread, off the claim and completion paths. History is best effort: a
write that fails is retried with the next group, and failover closes the rows of a worker
that died before its history reached the ledger."""

from __future__ import annotations

import threading

import structlog

from ledgerq.core import errors, fleet
from ledgerq.core.ports import WorkerStore

log = structlog.get_logger("ledgerq.recorder")

#: Most events kept while the database is unreachable; older ones are dropped beyond this.
MAX_BUFFERED = 100_000


class Recorder:
    """Collects assignment starts and ends and flushes them every ``interval_seconds``."""

    def __init__(self, store: WorkerStore, *, interval_seconds: float = 0.25) -> None:
        self._store = store
        self._interval = interval_seconds
        self._events: list[fleet.AssignmentEvent] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledgerq-recorder", daemon=True)

    def start(self) -> None:
        """Start flushing."""
        self._thread.start()

    def add(self, event: fleet.AssignmentEvent) -> None:
        """Queue one event for the next flush."""
        with self._lock:
            self._events.append(event)
            if len(self._events) > MAX_BUFFERED:
                del self._events[: len(self._events) - MAX_BUFFERED]

    def flush(self) -> bool:
        """Write what is queued; False (events kept) if the database refused."""
        with self._lock:
            events, self._events = self._events, []
        if not events:
            return True
        try:
            self._store.record_assignments(events)
        except errors.StoreError as exc:
            log.warning("assignment history not written; retrying", error=str(exc))
            with self._lock:
                self._events[:0] = events
            return False
        return True

    def stop(self) -> None:
        """Flush once more and stop."""
        self._stop.set()
        self._thread.join(10)
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.flush()
