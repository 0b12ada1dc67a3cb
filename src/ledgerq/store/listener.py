"""PostgreSQL LISTEN/NOTIFY wake-up: an idle fetcher starts new work within milliseconds."""

from __future__ import annotations

import threading

import psycopg
import sqlalchemy as sa

from ledgerq.store.pg_statements import NOTIFY_CHANNEL


class PgNotifyWaker:
    """A Waker that returns as soon as a ``NOTIFY ledgerq_jobs`` for one of its queues arrives.

    A background thread holds one autocommit connection listening on the channel; a lost
    connection only costs latency (the fetcher still polls), and it reconnects with backoff.

    ``lazy``: listen only from the first ``wait`` (a Redis worker's fallback): while Redis
    carries the ids, every enqueue's NOTIFY would wake the listening thread of every worker
    for nothing, and its GIL time delays the jobs Redis just handed over.
    """

    def __init__(self, engine: sa.Engine, queues: set[str], *, lazy: bool = False) -> None:
        url = engine.url.set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._queues = queues
        self._event = threading.Event()
        self._closed = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="ledgerq-listen", daemon=True)
        self._start_lock = threading.Lock()
        self.started = False
        """Whether the listening thread runs (from construction, or from the first wait)."""
        if not lazy:
            self._start()

    def _start(self) -> bool:
        """Start listening (once) and wait until LISTEN is in place, so no job committed after
        the caller's next claim goes unnoticed; True if this call started it."""
        with self._start_lock:
            if self.started or self._closed.is_set():
                return False
            self.started = True
            self._thread.start()
        self._listening.wait(5.0)
        return True

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if a notification arrived. A lazy waker's first
        call starts listening and returns True at once: a job committed before LISTEN sent
        no notification this waker saw, so the caller should claim once more."""
        if not self.started and self._start():
            return True
        woken = self._event.wait(timeout)
        if woken:
            # Only a wake-up is consumed: clearing after a timeout could drop a notification
            # that arrived just then, and the fetcher would sleep through a whole poll interval.
            self._event.clear()
        return woken

    def close(self) -> None:
        """Stop listening."""
        self._closed.set()
        self._event.set()

    def _listen(self) -> None:
        backoff = 0.1
        while not self._closed.is_set():
            try:
                with psycopg.connect(self._dsn, autocommit=True) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self._listening.set()
                    backoff = 0.1
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5):
                            if note.payload in self._queues:
                                self._event.set()
            except psycopg.Error:
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 5.0)
