"""Turns a database URL into a configured SQLAlchemy engine, per dialect."""

from __future__ import annotations

import threading
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ledgerq.core import errors
from ledgerq.core.redaction import mask_url

#: Execution option marking a transaction that only reads (SQLite then skips the write lock).
READ_ONLY_OPTION = "ledgerq_read_only"

_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mariadb+pymysql",
    "sqlite": "sqlite",
}


def normalize_url(url: str) -> sa.URL:
    """Parse ``url`` and pick ledgerq's driver when the URL names none; raise ``ConfigError``
    (with the password masked) if it is malformed."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:
        # ValueError: a port that is not a number.
        raise errors.ConfigError(f"invalid database URL {mask_url(url)!r}: {exc}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite" and _in_memory(parsed):
        raise errors.ConfigError(
            "an in-memory SQLite database cannot be a ledger: every connection would get its"
            " own empty database; use a file, e.g. sqlite:///ledgerq.db"
        )
    if backend not in _DRIVERS:
        raise errors.ConfigError(
            f"unsupported database {backend!r}: use sqlite, postgresql, mysql or mariadb"
        )
    if "+" not in parsed.drivername:
        parsed = parsed.set(drivername=_DRIVERS[backend])
    if parsed.get_backend_name() in ("mysql", "mariadb"):
        parsed = parsed.update_query_dict({"charset": "utf8mb4"})
    return parsed


def _in_memory(url: sa.URL) -> bool:
    mode = url.query.get("mode")
    return url.database in (None, "", ":memory:") or mode == "memory"


#: A ledger connection left idle inside a transaction this long is closed by the server, so a
#: frozen process (SIGSTOP, a VM pause) cannot hold row locks that block the failover of its
#: own jobs. The store's transactions never wait on the client for anywhere near this long.
IDLE_IN_TRANSACTION_SECONDS = 5


#: libpq settings that bound how long a connection to a vanished server (a host that died or
#: was cut off, which sends no reset) can block: a connect tries the next host of a
#: multi-host URL after 10 s, an idle or waiting connection is found dead by keepalives in
#: about 25 s, and a write the peer never acknowledges fails after 30 s. Without them a
#: worker's writer thread waited for the kernel's retransmissions, about 15 minutes.
PG_DEAD_PEER_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 10,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}


def create_engine(
    url: str,
    *,
    pool_size: int = 10,
    relaxed: bool = False,
    generic_plans: bool = False,
    application_name: str | None = None,
) -> sa.Engine:
    """Create an engine for ``url`` with ledgerq's per-dialect settings applied.

    ``relaxed`` makes a PostgreSQL engine whose commits do not wait for the WAL flush
    (``synchronous_commit = off``), for claims and heartbeats only: losing one in a crash is
    harmless because the fenced completion of a lost attempt is refused.

    ``generic_plans`` makes PostgreSQL plan each prepared statement once for all parameter
    values (``plan_cache_mode = force_generic_plan``), for statements whose best plan does
    not depend on them (see ``postgres/fast.py``). ``application_name`` names the sessions.

    PostgreSQL sessions run in UTC (``timezone = UTC``): psycopg then returns timestamps in
    ``datetime.UTC`` itself, and a claimed job's seven timestamps need no conversion (in any
    other zone, ``Etc/UTC`` included, psycopg and ``Job.from_row`` converted each one: about
    a third of a claim's client CPU). ``timestamptz`` values are instants either way.
    """
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        existing = parsed.query.get("options", "")
        existing = existing if isinstance(existing, str) else " ".join(existing)
        wanted = [
            f"-cidle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_SECONDS * 1000}",
            "-ctimezone=UTC",
        ]
        if relaxed:
            wanted.append("-csynchronous_commit=off")
        if generic_plans:
            wanted.append("-cplan_cache_mode=force_generic_plan")
        # An engine derived from another's URL already carries some of them.
        extra = [option for option in wanted if option not in existing.split()]
        parsed = parsed.update_query_dict({"options": " ".join([existing, *extra]).strip()})
        if application_name is not None:
            parsed = parsed.update_query_dict({"application_name": application_name})
    # No pre-ping: it costs a round trip per checkout on the hot path. A dropped connection
    # fails one call (StoreUnavailable), SQLAlchemy discards the pool, and callers retry.
    options: dict[str, Any] = {"pool_recycle": 3600}
    if backend == "sqlite":
        options["connect_args"] = {"timeout": 30, "check_same_thread": False}
    if backend == "postgresql":
        # A URL's own values win (connect_args would override the URL's query).
        defaults = {k: v for k, v in PG_DEAD_PEER_DEFAULTS.items() if k not in parsed.query}
        options["connect_args"] = {"prepare_threshold": 0, **defaults}
    else:
        options["pool_size"] = pool_size
        options["max_overflow"] = pool_size
    if backend in ("mysql", "mariadb"):
        # READ COMMITTED avoids the gap locks that make SKIP LOCKED claims deadlock.
        options["isolation_level"] = "READ COMMITTED"
    if backend == "mariadb":
        # MariaDB's name for the same guard (MySQL has none).
        timeout = f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION_SECONDS}"
        options["connect_args"] = {"init_command": timeout}
    engine = sa.create_engine(parsed, **options)
    if backend == "sqlite":
        _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: sa.Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Take transaction control from pysqlite so BEGIN IMMEDIATE below is ours.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        if engine.url.database not in (None, "", ":memory:"):
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    # Threads of one process queue here for the write lock instead of in SQLite's busy
    # handler, which polls with sleeps of up to 100 ms.
    write_lock = threading.RLock()
    # The connections (by id) whose transaction holds it. Not kept in ``conn.info``: reading
    # that on a connection a KeyboardInterrupt invalidated raises instead of ending the
    # transaction (a Ctrl-C then showed a traceback, and a held lock would never be released).
    holders: set[int] = set()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        # Take the write lock up front: a deferred transaction that reads and then writes can
        # fail with SQLITE_BUSY instead of waiting, which would make claims flaky. Read-only
        # calls say so and stay deferred, so monitoring never blocks the workers.
        if conn.get_execution_options().get(READ_ONLY_OPTION, False):
            conn.exec_driver_sql("BEGIN")
            return
        write_lock.acquire()
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            write_lock.release()
            raise
        holders.add(id(conn))

    def _on_end(conn: sa.Connection) -> None:
        if id(conn) in holders:
            holders.discard(id(conn))
            write_lock.release()

    sa.event.listen(engine, "commit", _on_end)
    sa.event.listen(engine, "rollback", _on_end)
