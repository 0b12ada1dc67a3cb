"""Announcer: sends the hints of committed jobs from a thread of its own, so an enqueue
returns once its rows committed, without waiting for the transport's round trip.

Safe because a hint is never what keeps a job: the job is committed before its hint is
handed over, and a hint that is never sent (the process exits first, the transport fails,
the backlog is full) only costs latency. An idle worker claims by query after an empty
pull, and the reconciler re-sends the ids of ``queued`` jobs older than ``REQUEUE_AFTER``
(docs/architecture.md, "Redis carries job ids" and "The reconciler")."""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from collections.abc import Sequence

import structlog

from ledgerq.core import errors
from ledgerq.core.job import JobHint
from ledgerq.core.ports import Transport

log = structlog.get_logger("ledgerq.producer.announcer")

#: Hints waiting to be sent at most; past it new hints are dropped (and counted): a transport
#: that cannot keep up must not grow a producer's memory without bound.
MAX_PENDING = 1_000_000
#: How long ``close`` (and the interpreter's exit) waits for waiting hints to be sent.
FLUSH_SECONDS = 2.0


class Announcer:
    """Sends hints handed to ``submit`` through ``transport.push`` from one daemon thread,
    all those waiting in one push. Thread-safe; the thread starts on the first ``submit``
    (again in a forked child). ``unsent`` counts hints that were never sent."""

    def __init__(self, transport: Transport, *, max_pending: int = MAX_PENDING) -> None:
        self._transport = transport
        self._max_pending = max_pending
        self._cond = threading.Condition()
        self._pending: list[JobHint] = []
        self._sending = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._unsent = 0

    @property
    def unsent(self) -> int:
        """Hints that were not sent: the transport failed or the backlog was full."""
        with self._cond:
            return self._unsent

    def submit(self, hints: Sequence[JobHint]) -> None:
        """Queue hints of committed jobs for sending; never blocks on the transport."""
        if not hints:
            return
        with self._cond:
            if self._pid != os.getpid():  # forked: the parent's thread is not ours
                self._pid, self._thread, self._pending, self._sending = os.getpid(), None, [], 0
            if self._closed or len(self._pending) + len(hints) > self._max_pending:
                self._unsent += len(hints)
                return
            self._pending.extend(hints)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ledgerq-announcer", daemon=True
                )
                self._thread.start()
                # At the interpreter's exit the daemon thread still runs when atexit
                # handlers do: send what is waiting (bounded), so a short script's last jobs
                # are not left to the reconciler. A weak reference: the hook must not keep a
                # dropped client alive.
                atexit.register(_flush_at_exit, weakref.ref(self))
            self._cond.notify()

    def flush(self, timeout: float = FLUSH_SECONDS) -> bool:
        """Wait up to ``timeout`` seconds until every submitted hint was sent (or counted
        unsent); True if none is left."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending or self._sending:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or self._pid != os.getpid():
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = FLUSH_SECONDS) -> None:
        """Send what is waiting (up to ``timeout`` seconds), then stop the thread; later
        hints are counted unsent. Calling it again does nothing."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._unsent += len(self._pending)
            self._pending = []
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                batch, self._pending = self._pending, []
                self._sending = len(batch)
            sent = self._send(batch)
            with self._cond:
                self._sending = 0
                if not sent:
                    self._unsent += len(batch)
                self._cond.notify_all()

    def _send(self, batch: list[JobHint]) -> bool:
        try:
            self._transport.push(batch)
        except errors.TransportError:
            return False  # logged by the transport once per outage; the jobs are committed
        except Exception:  # a bug must not end the thread: later hints would never be sent
            log.exception("could not send job hints", count=len(batch))
            return False
        return True


def _flush_at_exit(ref: weakref.ref[Announcer]) -> None:
    announcer = ref()
    if announcer is not None:
        announcer.flush()
