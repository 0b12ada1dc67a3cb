"""Completer: writes finished attempts to the ledger in groups, not one transaction per job."""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from ledgerq.core import errors
from ledgerq.core.operations import EventSink, StoreWriteFailed
from ledgerq.core.ports import Completion, JobStore

log = structlog.get_logger("ledgerq.completer")

MAX_GROUP = 500
#: Longest wait for more outcomes before a group is written, in seconds.
LINGER_SECONDS = 0.005


@dataclass(frozen=True, slots=True)
class Backlog:
    """Outcomes handed to the completer and not yet written."""

    pending: int
    oldest_seconds: float
    """How long the oldest of them has waited (0 when none waits)."""


class Completer:
    """Collects completions from executor threads and flushes them as one fenced group write.

    A group is written at most ``LINGER_SECONDS`` after its first outcome arrived, so under
    heavy load many outcomes share one transaction. ``on_written`` gets each
    completion with whether the fenced write applied. A failed write is retried with
    backoff, logged and counted (``StoreWriteFailed``) each time; nothing is dropped. A write
    that neither fails nor returns (a commit waiting for a synchronous standby that is gone)
    shows in ``backlog()``, which the fetcher reads to stop claiming work it cannot record.
    """

    def __init__(
        self,
        store: JobStore,
        on_written: Callable[[Sequence[tuple[Completion, bool]]], None],
        events: EventSink | None = None,
    ) -> None:
        self._store = store
        self._on_written = on_written
        self._events = events
        self._inbox: queue.SimpleQueue[Completion | None] = queue.SimpleQueue()
        self._pending = 0
        # Arrival time of each unwritten outcome, oldest first (groups are written in order).
        self._arrivals: collections.deque[float] = collections.deque()
        self._cond = threading.Condition()
        self._stopping = threading.Event()  # cuts a linger short on stop
        self._thread = threading.Thread(target=self._run, name="ledgerq-completer", daemon=True)

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def add(self, completion: Completion) -> None:
        """Queue one completion for the next group write."""
        with self._cond:
            self._pending += 1
            self._arrivals.append(time.monotonic())
        self._inbox.put(completion)

    def backlog(self) -> Backlog:
        """How many outcomes wait to be written, and for how long the oldest has."""
        with self._cond:
            if not self._arrivals:
                return Backlog(0, 0.0)
            return Backlog(self._pending, time.monotonic() - self._arrivals[0])

    def flush(self, timeout: float) -> bool:
        """Block until every queued completion is written; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending == 0, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop."""
        self._stopping.set()
        self._inbox.put(None)
        self._thread.join(timeout)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._inbox.get()
            group: list[Completion] = []
            if first is None:
                stopping = True
            else:
                group.append(first)
            # Linger briefly so a busy worker writes tens of outcomes per transaction instead of
            # a few: each write costs far more client CPU than the rows it carries. Sleeping
            # through the linger and then taking everything, rather than waiting on the queue
            # item by item, spares a thread wake-up (and a GIL hand-over) per finished job.
            if not stopping:
                self._stopping.wait(LINGER_SECONDS)
            while len(group) < MAX_GROUP:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                group.append(item)
            if group:
                self._write(group)

    def _write(self, group: list[Completion]) -> None:
        backoff = 0.05
        while True:
            try:
                applied = self._store.complete_jobs(group)
                break
            except Exception as exc:
                # A StoreError is expected (outage, failover); anything else is a bug, but
                # letting it end this thread would leave every later outcome unwritten.
                log.warning(
                    "completion write failed; retrying",
                    error=str(exc),
                    jobs=len(group),
                    backoff_s=backoff,
                    exc_info=not isinstance(exc, errors.StoreError),
                )
                if self._events is not None:
                    self._events.emit(StoreWriteFailed("completion"))
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
        for completion, ok in zip(group, applied, strict=True):
            if not ok:
                log.warning(
                    "stale completion refused",
                    job_id=completion.claim.job_id,
                    attempt=completion.claim.attempt,
                )
        self._on_written(list(zip(group, applied, strict=True)))
        with self._cond:
            self._pending -= len(group)
            for _ in group:
                self._arrivals.popleft()
            self._cond.notify_all()
