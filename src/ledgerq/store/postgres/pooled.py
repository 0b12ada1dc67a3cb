"""PostgreSQL behind a transaction-pooling proxy (PgBouncer, ``LEDGERQ_DB_POOLER=pgbouncer``):
each transaction may run on another server session, so the driver relies on none.

What changes against direct connections, and why:

- No server-side prepared statements (``prepare_threshold=None``, and the fast path never
  prepares): a statement prepared on one server session is unknown on the next, and
  PgBouncer 1.18 does not track them ("prepared statement ... does not exist").
- No ``options`` startup parameter (PgBouncer refuses it): the sessions' time zone is set
  with ``SET TIME ZONE``, a parameter PgBouncer tracks per client and re-applies on every
  server session it lends. ``idle_in_transaction_session_timeout`` and asynchronous commit
  of claims and heartbeats are not per-session settings any more: the operator sets the
  timeout on the role (docs/operations.md), and claims and heartbeats commit durably.
- Exclusive sections (the reconciler's pass, the vacuum) hold a lease row in
  ``distributed_locks`` instead of a session advisory lock: an advisory lock taken in one
  transaction stays on that server session, and its unlock may reach another one.
- LISTEN needs one session for as long as it listens: it goes over ``Pooler.direct_url``,
  or, without one, idle workers poll (NOTIFY itself is transactional and passes through).
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from ledgerq.store.dialects import POOLER_OPTION, EngineSettings, Pooler
from ledgerq.store.tables import distributed_locks

#: Seconds an exclusive section's lease lasts if its holder dies without releasing it; a
#: section that runs longer may be entered by another process, which every one of them
#: tolerates (each repair is fenced and safe to repeat; a second VACUUM waits).
LEASE_SECONDS = 60.0


def engine_options(
    url: sa.URL, asked: EngineSettings, pooler: Pooler, dead_peer: dict[str, Any]
) -> tuple[sa.URL, dict[str, Any]]:
    """The URL and engine options of an engine whose connections go through ``pooler``."""
    if asked.application_name is not None:
        url = url.update_query_dict({"application_name": asked.application_name})
    defaults = {k: v for k, v in dead_peer.items() if k not in url.query}
    return url, {
        # DB_POOL_SIZE, as on the other databases: the pooler's clients are cheap, but its
        # max_client_conn must cover them (docs/operations.md, "Pool sizing").
        "pool_size": asked.pool_size,
        "max_overflow": asked.pool_size,
        "connect_args": {"prepare_threshold": None, **defaults},
        "execution_options": {POOLER_OPTION: pooler},
    }


def configure_engine(engine: sa.Engine) -> None:
    """Run every session of ``engine`` in UTC (see ``PostgresDriver.engine_options``)."""

    @sa.event.listens_for(engine, "connect")
    def _utc(dbapi_connection: Any, _record: Any) -> None:
        # Session-level on purpose: PgBouncer records TimeZone for this client from the
        # server's report and sets it on every server session it lends the client later.
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SET TIME ZONE 'UTC'")
        dbapi_connection.commit()


def take_lease(conn: Connection, name: str, expires: sa.ColumnElement[Any]) -> bool:
    """Take the lease ``name`` (free or expired) in ``distributed_locks`` on the autocommit
    ``conn``, which remembers its owner for ``drop_lease``; False if another holds it."""
    t = distributed_locks
    owner = f"ledgerq-section-{uuid.uuid4().hex}"
    now = sa.func.clock_timestamp()
    held = {"owner": owner, "acquired_at": now, "expires_at": expires}
    taken = conn.execute(
        sa.update(t)
        .where(t.c.name == name, sa.or_(t.c.owner.is_(None), t.c.expires_at <= now))
        .values(token=t.c.token + 1, **held)
    ).rowcount
    if taken != 1:
        insert = postgresql.insert(t).values(name=name, token=1, **held)
        # RETURNING: psycopg reports no rowcount for an INSERT ... ON CONFLICT here.
        first = insert.on_conflict_do_nothing().returning(t.c.name)
        taken = 1 if conn.execute(first).first() is not None else 0
    if taken == 1:
        conn.info[f"lease:{name}"] = owner
    return taken == 1


def drop_lease(conn: Connection, name: str) -> None:
    """Release the lease ``name`` that ``take_lease`` took on ``conn`` (if it still holds)."""
    owner = conn.info.pop(f"lease:{name}", None)
    t = distributed_locks
    conn.execute(
        sa.update(t).where(t.c.name == name, t.c.owner == owner).values(owner=None, expires_at=None)
    )
