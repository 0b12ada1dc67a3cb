"""PostgreSQL LISTEN/NOTIFY wake-up: an idle fetcher starts new work within milliseconds."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import sqlalchemy as sa
import structlog

from ledgerq.store.postgres.statements import NOTIFY_CHANNEL

log = structlog.get_logger("ledgerq.listener")

#: libpq settings of every connection to PostgreSQL (the engine's, which
#: ``PostgresDriver.engine_options`` adds unless the URL sets them, and the listening one)
#: that bound how long a connection to a vanished server (a host that died or was cut off,
#: which sends no reset) can block: a connect tries the next host of a multi-host URL after
#: 10 s, an idle or waiting connection is found dead by keepalives in about 25 s, and a write
#: the peer never acknowledges fails after 30 s. Without them a worker's writer thread waited
#: for the kernel's retransmissions, about 15 minutes.
PG_DEAD_PEER_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}

#: ``application_name`` of the listening connection (visible in ``pg_stat_activity``).
LISTENER_NAME = "ledgerq-listen"


class PgNotifyWaker:
    """A Waker that returns as soon as a ``NOTIFY ledgerq_jobs`` for one of its queues arrives.

    A background thread holds one autocommit connection listening on the channel; a lost
    connection only costs latency (the fetcher still polls), and it reconnects with backoff.

    ``lazy``: listen only from the first ``wait`` (a Redis worker's fallback), and ``rest``
    stops listening until the next one (Redis answers again). While Redis carries the ids,
    every enqueue's NOTIFY would wake the listening thread of every worker for nothing, and its
    GIL time delays the jobs Redis just handed over.
    """

    def __init__(self, engine: sa.Engine, queues: set[str], *, lazy: bool = False) -> None:
        # The engine's own connect arguments: a URL rendered back to text spells the spaces of
        # a multi-option ``options`` as "+", which libpq does not decode, and the server then
        # refused every connection (one option's value swallowed the next).
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        kwargs.pop("context", None)  # SQLAlchemy's type adapters; not needed here
        self._connect_args: tuple[Any, ...] = tuple(args)
        # The LISTEN connection waits idle for minutes: keepalives find a vanished server.
        self._connect_kwargs: dict[str, Any] = {
            **PG_DEAD_PEER_DEFAULTS,
            **kwargs,
            "application_name": LISTENER_NAME,
        }
        self._queues = queues
        self._event = threading.Event()
        self._closed = threading.Event()
        self._listening = threading.Event()
        self._lock = threading.Lock()
        # Set to end the current listening thread; None while not listening.
        self._session: threading.Event | None = None
        self.listener_pid: int | None = None
        """Backend pid of the listening connection (None while none is open)."""
        if not lazy:
            self._start()

    @property
    def started(self) -> bool:
        """Whether a listening thread runs (from construction, or from the first wait)."""
        return self._session is not None

    def _start(self) -> bool:
        """Start listening and wait until LISTEN is in place, so no job committed after the
        caller's next claim goes unnoticed; True if this call started it."""
        with self._lock:
            if self._session is not None or self._closed.is_set():
                return False
            session = self._session = threading.Event()
            self._listening.clear()
            thread = threading.Thread(
                target=self._listen, args=(session,), name="ledgerq-listen", daemon=True
            )
            thread.start()
        self._listening.wait(5.0)
        return True

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if a notification arrived. When not listening
        (lazy, or at rest), the call starts listening and returns True at once: a job
        committed before LISTEN sent no notification this waker saw, so the caller should
        claim once more."""
        if self._session is None and self._start():
            return True
        woken = self._event.wait(timeout)
        if woken:
            # Only a wake-up is consumed: clearing after a timeout could drop a notification
            # that arrived just then, and the fetcher would sleep through a whole poll interval.
            self._event.clear()
        return woken

    def rest(self) -> None:
        """Stop listening (the connection closes within half a second) until the next wait."""
        with self._lock:
            if self._session is not None:
                self._session.set()
                self._session = None

    def close(self) -> None:
        """Stop listening for good."""
        self._closed.set()
        self.rest()
        self._event.set()

    def _listen(self, session: threading.Event) -> None:
        backoff = 0.1
        failing = False
        while not (session.is_set() or self._closed.is_set()):
            try:
                with psycopg.connect(
                    *self._connect_args, autocommit=True, **self._connect_kwargs
                ) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    if not session.is_set():
                        self.listener_pid = conn.info.backend_pid
                        self._listening.set()
                    if failing:
                        log.info("listening for new jobs again")
                    backoff, failing = 0.1, False
                    try:
                        while not (session.is_set() or self._closed.is_set()):
                            for note in conn.notifies(timeout=0.5):
                                if note.payload in self._queues:
                                    self._event.set()
                    finally:
                        if self.listener_pid == conn.info.backend_pid:
                            self.listener_pid = None
            except psycopg.Error as exc:
                if not failing:  # once per outage: idle workers still poll meanwhile
                    log.warning(
                        "cannot listen for new jobs; polling until it works", error=str(exc)
                    )
                    failing = True
                session.wait(backoff)
                backoff = min(backoff * 2, 5.0)
