"""Spooler: the producer's side of the enqueue spool (``LEDGERQ_SPOOL``). An enqueue the
database cannot take is written to the spool and answered ``spooled``; the spool drainer of a
worker (or ``ledgerq spool drain``) replays it later (see ``core/spool.py``).

Order per producer: once this producer has entries in the spool, its next enqueue first
replays them itself (if no drainer holds them) and goes to the database only when none are
left; otherwise it is appended behind them. So a producer's jobs are created in the order it
enqueued them, whichever way each one travelled.
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence

import structlog

from ledgerq.core import errors, spool
from ledgerq.core.job import EnqueueResult, JobHint, NewJob
from ledgerq.core.ports import JobStore

log = structlog.get_logger("ledgerq.spool")

#: After the database failed an enqueue, the next ones go straight to the spool for this long
#: (a down database would otherwise cost every enqueue a failed connection attempt).
RETRY_DATABASE_SECONDS = 0.5

Insert = Callable[[Sequence[NewJob]], list[EnqueueResult]]
Announce = Callable[[list[JobHint]], None]


def new_producer_id() -> str:
    """host-pid-random: a spool sequence of its own for each producer process."""
    host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname())
    return f"{host[:40]}-{os.getpid()}-{secrets.token_hex(4)}"


class Spooler:
    """Routes one producer's enqueues to the database, or to the spool while it is down.
    Thread-safe: while the database answers and nothing is spooled, enqueues run in
    parallel; from the first failure until the spool is empty again they are serialised,
    so the producer's order holds."""

    def __init__(
        self,
        target: spool.Spool,
        store: JobStore,
        *,
        producer: str | None = None,
    ) -> None:
        """Spool into ``target``; replay this producer's own entries into ``store``."""
        self.spool = target
        self.producer = producer or new_producer_id()
        self._store = store
        self._serial = itertools.count(1)
        self._lock = threading.Lock()
        self._pending = False
        self._database_back_at = 0.0
        self._outage = False
        self.spooled_jobs = 0
        """Jobs this producer wrote to the spool."""

    def key(self, jobs: Sequence[NewJob]) -> list[NewJob]:
        """``jobs`` with the keys that make their inserts happen at most once (see
        ``core.spool.key_jobs``)."""
        return spool.key_jobs(jobs, self.producer, lambda: next(self._serial))

    def enqueue(
        self, jobs: Sequence[NewJob], insert: Insert, announce: Announce
    ) -> list[EnqueueResult] | None:
        """Insert keyed ``jobs`` with ``insert``; None if they were spooled instead (the
        database is unavailable, or older entries of this producer still wait). Raise
        ``SpoolUnavailable`` when neither the database nor the spool took them. ``announce``
        gets the hints of the jobs this producer's own replay of older entries created."""
        if not self._pending and not self._outage:
            # The common case takes no lock, so a producer's threads insert in parallel.
            try:
                return insert(jobs)
            except errors.StoreUnavailable as exc:
                with self._lock:
                    self._note_outage(exc)
        with self._lock:
            if time.monotonic() >= self._database_back_at:
                try:
                    if not self._pending or self._replay_own(announce):
                        results = insert(jobs)
                        if self._outage:
                            self._outage = False
                            log.info("database answers again; enqueues go to it")
                        return results
                except errors.StoreUnavailable as exc:
                    self._note_outage(exc)
            self._append(jobs)
            return None

    def _note_outage(self, exc: errors.StoreUnavailable) -> None:
        self._database_back_at = time.monotonic() + RETRY_DATABASE_SECONDS
        if not self._outage:  # once per outage, not once per enqueue
            self._outage = True
            log.warning("database unavailable; spooling enqueues", error=str(exc))

    def _replay_own(self, announce: Announce) -> bool:
        """Replay this producer's own entries; whether none is left. False when a drainer
        holds them (the new jobs queue up behind)."""
        with self.spool.hold(self.producer) as held:
            if not held:
                return False
            for _ in spool.replay(self.spool, self._store, self.producer, announce=announce):
                pass
            self._pending = self.spool.size(self.producer) > 0
            return not self._pending

    def _append(self, jobs: Sequence[NewJob]) -> None:
        try:
            self.spool.append(self.producer, spool.encode_entry(jobs))
        except errors.SpoolUnavailable:
            raise
        except errors.LedgerqError as exc:
            raise errors.SpoolUnavailable(f"the spool failed too: {exc}") from exc
        self._pending = True
        self.spooled_jobs += len(jobs)
