"""PostgreSQL LISTEN for finished jobs: ``app.jobs.wait`` wakes when the group completion that
finished its job commits (``ledgerq_finished``, see ``statements.COMPLETE_GROUP``). A wait
registers its job in ``job_waiters`` for as long as it lasts: completions notify only for
the jobs someone waits on."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import sqlalchemy as sa
import structlog

from ledgerq.store.postgres.listener import PG_DEAD_PEER_DEFAULTS
from ledgerq.store.postgres.statements import FINISHED_CHANNEL
from ledgerq.store.tables import job_waiters

log = structlog.get_logger("ledgerq.listener")

#: ``application_name`` of the listening connection (visible in ``pg_stat_activity``).
LISTENER_NAME = "ledgerq-listen-finished"
#: How long ``watch`` waits for LISTEN to be in place before it returns anyway.
START_WAIT = 2.0
#: A registered wait older than this belongs to a process that died while waiting.
STALE_WAIT = timedelta(days=1)


class PgFinishedSignal:
    """A ``FinishSignal``: one listening connection per process (opened by the first ``watch``)
    that sets the events of the waiters whose job ids a notification names (every waiter's for
    ``*``), and a ``job_waiters`` row per wait. A lost connection only costs latency: waiters
    still re-read their job."""

    def __init__(self, engine: sa.Engine, listen_engine: sa.Engine | None = None) -> None:
        """``listen_engine``: where the listening connection goes, when not ``engine``'s
        database URL (behind a transaction-pooling proxy, its direct URL)."""
        self._engine = engine
        self._keys: dict[threading.Event, str] = {}
        listen = listen_engine or engine
        args, kwargs = listen.dialect.create_connect_args(listen.url)
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
        key = str(uuid.uuid4())
        try:
            self._register(job_id, key)
        except sa.exc.SQLAlchemyError as exc:
            log.info("cannot register a wait; it polls", job_id=job_id, error=str(exc))
        else:
            with self._lock:
                self._keys[event] = key
        return event

    def _register(self, job_id: int, key: str) -> None:
        with self._engine.begin() as conn:
            # Registrations of waiters that died: their jobs ended, or nobody waits anymore.
            conn.execute(
                job_waiters.delete().where(job_waiters.c.since < sa.func.now() - STALE_WAIT)
            )
            conn.execute(
                job_waiters.insert().values(job_id=job_id, waiter=key, since=sa.func.now())
            )

    def unwatch(self, job_id: int, event: threading.Event) -> None:
        """Forget a watch (the wait ended) and its registration."""
        with self._lock:
            key = self._keys.pop(event, None)
            events = self._waiters.get(job_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waiters[job_id]
        if key is None:
            return
        try:
            with self._engine.begin() as conn:
                conn.execute(
                    job_waiters.delete().where(
                        job_waiters.c.job_id == job_id, job_waiters.c.waiter == key
                    )
                )
        except sa.exc.SQLAlchemyError as exc:  # left for the next wait's clean-up
            log.info("cannot remove a wait's registration", job_id=job_id, error=str(exc))

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
                    # Ledgers in other schemas of the database notify the same channel.
                    schema = str(conn.execute("SELECT current_schema()").fetchone()[0])  # type: ignore[index]
                    # Completions may have committed while it was not listening; woken
                    # before ``watch`` returns, so a caller may clear its event after it.
                    self._wake(None)
                    self._listening.set()
                    backoff = 0.1
                    while not self._closed.is_set():
                        for note in conn.notifies(timeout=0.5):
                            ids = _ids(note.payload, schema)
                            if ids is None or ids:
                                self._wake(ids)
            except psycopg.Error as exc:
                self._listening.clear()
                log.info("cannot listen for finished jobs; waits poll", error=str(exc))
                self._closed.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        self._listening.clear()


def _ids(payload: str, schema: str) -> set[int] | None:
    """The ids of this ledger's jobs a notification (``<schema>:<id>``) names: empty for another
    schema's; None (every waiter) for anything unreadable."""
    owner, _, job_id = payload.rpartition(":")
    if owner != schema:
        return set() if owner else None
    try:
        return {int(job_id)}
    except ValueError:
        return None
