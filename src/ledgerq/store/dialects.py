"""Every difference between SQLite, PostgreSQL and MySQL/MariaDB, and nowhere else.

Timestamps that decide leases come from the database clock (``now``/``now_plus``). The claim
is one atomic round trip per dialect: PostgreSQL ``UPDATE .. WHERE id IN (SELECT .. FOR UPDATE
SKIP LOCKED) RETURNING``; MySQL/MariaDB ``SELECT .. FOR UPDATE SKIP LOCKED`` then ``UPDATE`` in
one transaction; SQLite ``BEGIN IMMEDIATE`` (see engine.py) with ``UPDATE .. RETURNING``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection, RowMapping

from ledgerq.store.tables import jobs

NOTIFY_CHANNEL = "ledgerq_jobs"


class Dialect:
    """Generic SQL; subclasses override what their database does differently or faster."""

    name = "generic"
    #: Whether the claim and heartbeat may skip waiting for the WAL flush (see docs/durability.md).
    async_commit_sql: str | None = None

    def now(self) -> sa.ColumnElement[Any]:
        """The database's current UTC time."""
        raise NotImplementedError

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The database's current UTC time plus ``seconds`` (a float expression)."""
        raise NotImplementedError

    def bind_time(self, value: Any) -> Any:
        """Adapt an aware UTC datetime for binding (naive UTC where the column has no zone)."""
        return value.replace(tzinfo=None)

    def relax_durability(self, conn: Connection) -> None:
        """Let the current transaction commit without waiting for the disk, where supported."""
        if self.async_commit_sql:
            conn.exec_driver_sql(self.async_commit_sql)

    def claim(
        self, conn: Connection, picked: sa.Select[Any], values: dict[str, Any]
    ) -> Sequence[RowMapping]:
        """Move the rows ``picked`` selects to running with ``values``; return them."""
        ids = picked.scalar_subquery()
        stmt = sa.update(jobs).where(jobs.c.id.in_(ids)).values(values).returning(*jobs.c)
        return conn.execute(stmt).mappings().all()

    def insert_unless_duplicate(self, conn: Connection, row: dict[str, Any]) -> int | None:
        """Insert one job row; return its id, or None if its dedupe key is taken."""
        stmt = self._insert_ignore().values(row).returning(jobs.c.id)
        found = conn.execute(stmt).scalar()
        return int(found) if found is not None else None

    def _insert_ignore(self) -> Any:
        raise NotImplementedError

    def update_many(
        self,
        conn: Connection,
        stmt: sa.Update,
        params: Sequence[dict[str, Any]],
    ) -> list[bool]:
        """Run a fenced UPDATE once per parameter set, in the caller's transaction."""
        return [conn.execute(stmt, p).rowcount == 1 for p in params]

    def notify(self, conn: Connection, queues: set[str]) -> None:
        """Wake idle workers of these queues when the transaction commits (if supported)."""


class PostgresDialect(Dialect):
    """PostgreSQL: SKIP LOCKED, RETURNING, NOTIFY, asynchronous commit for claims."""

    name = "postgresql"
    # A claim or heartbeat lost in a crash is harmless: the job keeps its old attempt and the
    # fenced completion of the lost attempt is refused. Enqueue and completion stay durable.
    async_commit_sql = "SET LOCAL synchronous_commit = off"

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.clock_timestamp()

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        interval = sa.func.make_interval(0, 0, 0, 0, 0, 0, sa.cast(seconds, sa.Float))
        return sa.func.clock_timestamp() + interval

    def bind_time(self, value: Any) -> Any:
        return value

    def claim(
        self, conn: Connection, picked: sa.Select[Any], values: dict[str, Any]
    ) -> Sequence[RowMapping]:
        self.relax_durability(conn)
        ids = picked.with_for_update(skip_locked=True).scalar_subquery()
        stmt = sa.update(jobs).where(jobs.c.id.in_(ids)).values(values).returning(*jobs.c)
        return conn.execute(stmt).mappings().all()

    def _insert_ignore(self) -> Any:
        return postgresql.insert(jobs).on_conflict_do_nothing()

    def notify(self, conn: Connection, queues: set[str]) -> None:
        for queue in sorted(queues):
            conn.execute(sa.select(sa.func.pg_notify(NOTIFY_CHANNEL, queue)))


class MysqlDialect(Dialect):
    """MySQL/MariaDB: SKIP LOCKED, but no UPDATE .. RETURNING and no LIMIT in IN-subqueries."""

    name = "mysql"

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.utc_timestamp(6)

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        micros = sa.func.round(sa.cast(seconds, sa.Float) * 1_000_000)
        return sa.func.timestampadd(sa.literal_column("MICROSECOND"), micros, self.now())

    def claim(
        self, conn: Connection, picked: sa.Select[Any], values: dict[str, Any]
    ) -> Sequence[RowMapping]:
        ids = list(conn.execute(picked.with_for_update(skip_locked=True)).scalars())
        if not ids:
            return []
        conn.execute(sa.update(jobs).where(jobs.c.id.in_(ids)).values(values))
        return conn.execute(sa.select(*jobs.c).where(jobs.c.id.in_(ids))).mappings().all()

    def insert_unless_duplicate(self, conn: Connection, row: dict[str, Any]) -> int | None:
        # A savepoint keeps the caller's transaction usable after the duplicate-key error;
        # INSERT IGNORE would also hide truncation and other real errors.
        try:
            with conn.begin_nested():
                result = conn.execute(sa.insert(jobs).values(row))
        except sa.exc.IntegrityError as exc:
            if getattr(exc.orig, "args", (None,))[0] == 1062:  # ER_DUP_ENTRY
                return None
            raise
        return int(result.inserted_primary_key[0])


class SqliteDialect(Dialect):
    """SQLite: one writer at a time (BEGIN IMMEDIATE), RETURNING since 3.35."""

    name = "sqlite"
    _format = "%Y-%m-%d %H:%M:%f000"  # matches SQLAlchemy's stored text, to the millisecond

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.strftime(self._format, "now")

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        modifier = sa.func.printf("%+.6f seconds", sa.cast(seconds, sa.Float))
        return sa.func.strftime(self._format, "now", modifier)

    def _insert_ignore(self) -> Any:
        return sqlite.insert(jobs).on_conflict_do_nothing()


def dialect_for(engine_dialect_name: str) -> Dialect:
    """Return the Dialect for a SQLAlchemy dialect name."""
    if engine_dialect_name == "postgresql":
        return PostgresDialect()
    if engine_dialect_name in ("mysql", "mariadb"):
        return MysqlDialect()
    if engine_dialect_name == "sqlite":
        return SqliteDialect()
    raise ValueError(f"unsupported database dialect {engine_dialect_name!r}")
