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
    """

    def __init__(self, engine: sa.Engine, queues: set[str]) -> None:
        url = engine.url.set(drivername="postgresql")
        self._dsn = url.render_as_string(hide_password=False)
        self._queues = queues
        self._event = threading.Event()
        self._closed = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="ledgerq-listen", daemon=True)
        self._thread.start()
        # Listen before the first claim, so no job committed after that claim goes unnoticed.
        self._listening.wait(5.0)

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if a notification arrived."""
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
