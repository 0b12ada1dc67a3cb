"""PostgreSQL LISTEN for finished jobs: ``app.jobs.wait`` wakes when the group completion that
finished its job commits (``ledgerq_finished``, see ``statements.COMPLETE_GROUP``)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import sqlalchemy as sa
import structlog

from ledgerq.store.postgres.postgres_driver import PG_DEAD_PEER_DEFAULTS
from ledgerq.store.postgres.statements import FINISHED_CHANNEL

log = structlog.get_logger("ledgerq.listener")

#: ``application_name`` of the listening connection (visible in ``pg_stat_activity``).
LISTENER_NAME = "ledgerq-listen-finished"
#: How long ``watch`` waits for LISTEN to be in place before it returns anyway.
START_WAIT = 2.0


class PgFinishedSignal:
    """A ``FinishSignal``: one listening connection per process (opened by the first ``watch``)
    that sets the events of the waiters whose job ids a notification names (every waiter's for
    ``*``). A lost connection only costs latency: waiters still re-read their job."""

    def __init__(self, engine: sa.Engine) -> None:
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        kwargs.pop("context", None)
        self._connect_args: tuple[Any, ...] = tuple(args)
        self._connect_kwargs: dict[str, Any] = {
            **PG_DEAD_PEER_DEFAULTS,
            **kwargs,
            "application_name": LISTENER_NAME,
        }
        self._lock = threading.Lock()
        self._waiters: dict[int, set[threading.Event]] = {}
        self._listening = threading.Event()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, job_id: int) -> threading.Event:
        """An event set when a completion of ``job_id`` is notified; listening is in place
        when this returns (or ``START_WAIT`` passed), so read the job only after it."""
        event = threading.Event()
        with self._lock:
            self._waiters.setdefault(job_id, set()).add(event)
            if self._thread is None and not self._closed.is_set():
                self._thread = threading.Thread(
                    target=self._listen, name="ledgerq-listen-finished", daemon=True
                )
                self._thread.start()
        self._listening.wait(START_WAIT)
        return event

    def unwatch(self, job_id: int, event: threading.Event) -> None:
        """Forget a watch (the wait ended)."""
        with self._lock:
            events = self._waiters.get(job_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[job_id]

    def close(self) -> None:
        """Stop listening (within half a second) and wake every waiter."""
        self._closed.set()
        self._wake(None)

    def _wake(self, ids: set[int] | None) -> None:
        with self._lock:
            chosen = [
                event
                for job_id, events in self._waiters.items()
                if ids is None or job_id in ids
                for event in events
            ]
        for event in chosen:
            event.set()

    def _listen(self) -> None:
        backoff = 0.1
        while not self._closed.is_set():
            try:
                with psycopg.connect(
                    *self._connect_args, autocommit=True, **self._connect_kwargs
                ) as conn:
                    conn.execute(f"LISTEN {FINISHED_CHANNEL}")
                    # Completions may have committed while it was not listening; woken
                    # before ``watch`` returns, so a caller may clear its event after it.
                    self._wake(None)
                    self._listening.set()
                    backoff = 0.1
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5):
                            self._wake(_ids(note.payload))
            except psycopg.Error as exc:
                self._listening.clear()
                log.info("cannot listen for finished jobs; waits poll", error=str(exc))
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        self._listening.clear()


def _ids(payload: str) -> set[int] | None:
    """The ids a notification names; None (every waiter) for ``*`` or anything unreadable."""
    try:
        return {int(part) for part in payload.split(",")}
    except ValueError:
        return None
