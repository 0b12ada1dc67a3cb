"""Every difference between SQLite, PostgreSQL and MySQL/MariaDB, and nowhere else.

Timestamps that decide leases come from the database clock (``now``/``now_plus``). The claim
is one atomic round trip per dialect: PostgreSQL ``UPDATE .. WHERE id IN (SELECT .. FOR UPDATE
SKIP LOCKED) RETURNING``; MySQL/MariaDB ``SELECT .. FOR UPDATE SKIP LOCKED`` then ``UPDATE`` in
one transaction; SQLite ``BEGIN IMMEDIATE`` (see engine.py) with ``UPDATE .. RETURNING``.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection, RowMapping

from ledgerq.store import pg_statements as pg
from ledgerq.store.pg_statements import NOTIFY_CHANNEL
from ledgerq.store.tables import jobs


class Dialect:
    """Generic SQL; subclasses override what their database does differently or faster."""

    name = "generic"

    def now(self) -> sa.ColumnElement[Any]:
        """The database's current UTC time."""
        raise NotImplementedError

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The database's current UTC time plus ``seconds`` (a float expression)."""
        raise NotImplementedError

    def bind_time(self, value: Any) -> Any:
        """Adapt an aware UTC datetime for binding (naive UTC where the column has no zone)."""
        return value.replace(tzinfo=None)

    def build_claim(self, picked: sa.Select[Any], values: dict[str, Any]) -> Any:
        """Prepare, once per queue set, what ``run_claim`` executes: move the rows ``picked``
        selects to running with ``values``. Built statements are reused, so SQLAlchemy's
        compiled cache is hit without rebuilding the statement tree on every claim."""
        ids = picked.scalar_subquery()
        return sa.update(jobs).where(jobs.c.id.in_(ids)).values(values).returning(*jobs.c)

    def run_claim(
        self, conn: Connection, built: Any, params: dict[str, Any]
    ) -> Sequence[RowMapping]:
        """Execute a claim prepared by ``build_claim``; return the claimed rows."""
        return conn.execute(built, params).mappings().all()

    def insert_unless_duplicate(self, conn: Connection, row: dict[str, Any]) -> int | None:
        """Insert one job row; return its id, or None if its dedupe key is taken."""
        stmt = self._insert_ignore().values(row).returning(jobs.c.id)
        found = conn.execute(stmt).scalar()
        return int(found) if found is not None else None

    def _insert_ignore(self) -> Any:
        raise NotImplementedError

    def insert_or_skip(self, conn: Connection, table: sa.Table, row: dict[str, Any]) -> bool:
        """Insert ``row`` into ``table`` unless its primary key exists (waiting for a
        concurrent inserter of the same key to finish); True if inserted."""
        insert: Any = postgresql.insert if self.name == "postgresql" else _sqlite().insert
        key = table.primary_key.columns[0]  # RETURNING: rowcount is -1 here under psycopg
        stmt = insert(table).values(row).on_conflict_do_nothing().returning(key)
        return conn.execute(stmt).first() is not None

    #: Execution options for a call that is a single statement (atomic on its own).
    single_statement_options: dict[str, Any] = {}  # noqa: RUF012 - read-only

    def update_many(
        self,
        conn: Connection,
        stmt: sa.Update,
        params: Sequence[dict[str, Any]],
    ) -> list[bool]:
        """Run a fenced UPDATE once per parameter set, in the caller's transaction."""
        return [conn.execute(stmt, p).rowcount == 1 for p in params]

    #: Whether ``insert_plain`` also wakes the workers of the inserted queues.
    insert_notifies = False

    def insert_plain(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        """Insert rows (with ``delay_s``) in one statement and return ids in input order, or
        None to let the caller use SQLAlchemy's portable bulk insert."""
        return None

    def complete_group(
        self, conn: Connection, params: Sequence[dict[str, Any]]
    ) -> list[bool] | None:
        """Write a group of fenced outcomes in one statement, or None for the portable loop.
        Each param has claim_id, claim_attempt, new_state, new_result, new_error, retry_delay."""
        return None

    def heartbeat_group(
        self, conn: Connection, ids: Sequence[int], attempts: Sequence[int], lease_seconds: float
    ) -> list[bool] | None:
        """Renew leases in one statement, or None for the portable loop."""
        return None

    def notify(self, conn: Connection, queues: set[str]) -> None:
        """Wake idle workers of these queues when the transaction commits (if supported)."""

    def maintain(self, engine: sa.Engine) -> bool:
        """Clean up after churn if the server will not; True if something was done."""
        return False

    def upsert_assignments(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        """Write assignment rows (a_job, a_attempt, a_worker, a_started, a_outcome) in one
        statement: insert new attempts, close open ones (the first end wins). False: the
        dialect has no such statement and the caller runs the portable steps."""
        return False

    #: Whether ``claim_hinted`` has a statement of its own (else the portable IN-list claim).
    claims_hints_natively = False

    #: Whether the statements that end attempts (completions) write the attempts'
    #: ``job_assignments`` rows themselves (else the worker's recorder writes that history).
    records_history_inline = False

    def end_assignments(self, conn: Connection, ends: Sequence[tuple[int, int, str]]) -> None:
        """Write the history rows of ``(job_id, attempt, outcome)`` whose outcomes were just
        written in ``conn``'s transaction (only where ``records_history_inline``)."""

    def claim_hinted(
        self, conn: Connection, params: dict[str, Any], queues: Sequence[str]
    ) -> Sequence[RowMapping]:
        """Claim among ``params["hint_ids"]`` in one statement whose text does not depend on
        the number of hints (SQLAlchemy's portable IN list is new SQL for every length)."""
        raise NotImplementedError

    def try_lock(self, conn: Connection, name: str) -> bool:
        """Take the named session lock on ``conn`` without waiting; True if taken. SQLite
        needs none: one host, and every repair is fenced and safe to repeat."""
        return True

    def unlock(self, conn: Connection, name: str) -> None:
        """Release a lock taken by ``try_lock`` on the same connection."""


class PostgresDialect(Dialect):
    """PostgreSQL: SKIP LOCKED, RETURNING, NOTIFY, asynchronous commit for claims."""

    name = "postgresql"

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.clock_timestamp()

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        interval = sa.func.make_interval(0, 0, 0, 0, 0, 0, sa.cast(seconds, sa.Float))
        return sa.func.clock_timestamp() + interval

    def bind_time(self, value: Any) -> Any:
        return value

    def build_claim(self, picked: sa.Select[Any], values: dict[str, Any]) -> Any:
        # No history row yet: the statement that ends the attempt writes it.
        return super().build_claim(picked.with_for_update(skip_locked=True), values)

    def _insert_ignore(self) -> Any:
        return postgresql.insert(jobs).on_conflict_do_nothing()

    single_statement_options = {"isolation_level": "AUTOCOMMIT"}  # noqa: RUF012
    insert_notifies = True

    def insert_plain(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        # Ids come from the sequence in the document's order, so ascending ids are input order.
        ids: Sequence[Any] = conn.execute(pg.INSERT_NOTIFY, pg.insert_values(rows)).scalars().all()
        return sorted(int(i) for i in ids)

    def complete_group(
        self, conn: Connection, params: Sequence[dict[str, Any]]
    ) -> list[bool] | None:
        rows = conn.execute(pg.COMPLETE_GROUP, pg.complete_group_values(params)).all()
        return pg.applied(((p["claim_id"], p["claim_attempt"]) for p in params), rows)

    def heartbeat_group(
        self, conn: Connection, ids: Sequence[int], attempts: Sequence[int], lease_seconds: float
    ) -> list[bool] | None:
        params = pg.heartbeat_values(ids, attempts, lease_seconds)
        rows = conn.execute(pg.HEARTBEAT_GROUP, params).all()
        return pg.applied(zip(ids, attempts, strict=True), rows)

    def maintain(self, engine: sa.Engine) -> bool:
        # A queue table churns; with autovacuum off (or behind) dead index entries pile up in
        # front of the claim and stale statistics mislead the planner. One worker at a time
        # (advisory lock) vacuums and analyzes the table when enough rows died.
        with engine.connect() as plain:
            conn = plain.execution_options(isolation_level="AUTOCOMMIT")
            dead = conn.exec_driver_sql(_PG_DEAD_TUPLES).scalar() or 0
            if dead < MAINTAIN_DEAD_TUPLES:
                return False
            if not conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({_MAINTAIN_LOCK})").scalar():
                return False
            try:
                conn.exec_driver_sql("VACUUM (ANALYZE) jobs")
            finally:
                conn.exec_driver_sql(f"SELECT pg_advisory_unlock({_MAINTAIN_LOCK})")
        return True

    def upsert_assignments(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        document = json.dumps(
            [
                {
                    "job_id": r["a_job"],
                    "attempt": r["a_attempt"],
                    "worker_id": r["a_worker"],
                    "started_at": r["a_started"].isoformat() if r["a_started"] else None,
                    "outcome": r["a_outcome"],
                }
                for r in rows
            ]
        )
        conn.execute(pg.UPSERT_ASSIGNMENTS, {"rows": document})
        return True

    claims_hints_natively = True
    records_history_inline = True

    def end_assignments(self, conn: Connection, ends: Sequence[tuple[int, int, str]]) -> None:
        if ends:
            ids, attempts, outcomes = (list(column) for column in zip(*ends, strict=True))
            conn.execute(
                pg.END_ASSIGNMENTS, {"ids": ids, "attempts": attempts, "outcomes": outcomes}
            )

    def claim_hinted(
        self, conn: Connection, params: dict[str, Any], queues: Sequence[str]
    ) -> Sequence[RowMapping]:
        values = pg.hinted_claim_values(params, queues)
        return conn.execute(pg.CLAIM_HINTED, values).mappings().all()

    def try_lock(self, conn: Connection, name: str) -> bool:
        key = self._lock_key(conn, name)
        return bool(conn.execute(sa.select(sa.func.pg_try_advisory_lock(key))).scalar())

    def unlock(self, conn: Connection, name: str) -> None:
        conn.execute(sa.select(sa.func.pg_advisory_unlock(self._lock_key(conn, name))))

    @staticmethod
    def _lock_key(conn: Connection, name: str) -> int:
        # Advisory locks are database-wide: the ledger's schema goes into the key, so two
        # ledgers in one database (one schema each) never hold each other's lock.
        # The schema is read once per pooled connection (its search_path is fixed), not for
        # both the lock and the unlock.
        if "ledger_schema" not in conn.info:
            conn.info["ledger_schema"] = conn.execute(sa.select(sa.func.current_schema())).scalar()
        return zlib.crc32(f"{conn.info['ledger_schema']}:{name}".encode())

    def notify(self, conn: Connection, queues: set[str]) -> None:
        for queue in sorted(queues):
            conn.execute(sa.select(sa.func.pg_notify(NOTIFY_CHANNEL, queue)))


#: Dead rows in ``jobs`` (per pg_stat) above which a worker vacuums the table itself.
MAINTAIN_DEAD_TUPLES = 20_000
_MAINTAIN_LOCK = 0x6C65_6467  # "ledg": an arbitrary, fixed advisory-lock key
_PG_DEAD_TUPLES = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('jobs')"


def _ledger_lock_name(name: str) -> sa.ColumnElement[str]:
    """A MySQL user lock's name for ``name`` in this ledger: ``GET_LOCK`` names are
    server-wide, so the database goes into it (hashed: names are capped at 64 characters)."""
    database = sa.func.left(sa.func.sha1(sa.func.coalesce(sa.func.database(), "")), 16)
    return sa.func.concat(name, ":", database)


class MysqlDialect(Dialect):
    """MySQL/MariaDB: SKIP LOCKED, but no UPDATE .. RETURNING and no LIMIT in IN-subqueries."""

    name = "mysql"

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.utc_timestamp(6)

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        micros = sa.func.round(sa.cast(seconds, sa.Float) * 1_000_000)
        return sa.func.timestampadd(sa.literal_column("MICROSECOND"), micros, self.now())

    def build_claim(self, picked: sa.Select[Any], values: dict[str, Any]) -> Any:
        ids: sa.BindParameter[Any] = sa.bindparam("claimed_ids", expanding=True)
        return (
            picked.with_for_update(skip_locked=True),
            sa.update(jobs).where(jobs.c.id.in_(ids)).values(values),
            sa.select(*jobs.c).where(jobs.c.id.in_(ids)),
        )

    def run_claim(
        self, conn: Connection, built: Any, params: dict[str, Any]
    ) -> Sequence[RowMapping]:
        pick, update, fetch = built
        ids: list[Any] = list(conn.execute(pick, params).scalars())
        if not ids:
            return []
        conn.execute(update, {**params, "claimed_ids": ids})
        return conn.execute(fetch, {"claimed_ids": ids}).mappings().all()

    def try_lock(self, conn: Connection, name: str) -> bool:
        return conn.execute(sa.select(sa.func.get_lock(_ledger_lock_name(name), 0))).scalar() == 1

    def unlock(self, conn: Connection, name: str) -> None:
        conn.execute(sa.select(sa.func.release_lock(_ledger_lock_name(name))))

    def insert_or_skip(self, conn: Connection, table: sa.Table, row: dict[str, Any]) -> bool:
        try:
            with conn.begin_nested():  # see insert_unless_duplicate
                conn.execute(sa.insert(table).values(row))
        except sa.exc.IntegrityError as exc:
            if getattr(exc.orig, "args", (None,))[0] == 1062:  # ER_DUP_ENTRY
                return False
            raise
        return True

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
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])


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
        return _sqlite().insert(jobs).on_conflict_do_nothing()


def dialect_for(engine_dialect_name: str) -> Dialect:
    """Return the Dialect for a SQLAlchemy dialect name."""
    if engine_dialect_name == "postgresql":
        return PostgresDialect()
    if engine_dialect_name in ("mysql", "mariadb"):
        return MysqlDialect()
    if engine_dialect_name == "sqlite":
        return SqliteDialect()
    raise ValueError(f"unsupported database dialect {engine_dialect_name!r}")


def max_connections(conn: Connection) -> int | None:
    """The server's connection limit (None for SQLite, which has none)."""
    name = conn.dialect.name
    if name == "postgresql":
        return int(conn.exec_driver_sql("SHOW max_connections").scalar_one())
    if name in ("mysql", "mariadb"):
        return int(conn.exec_driver_sql("SELECT @@max_connections").scalar_one())
    return None


def _sqlite() -> Any:
    """SQLAlchemy's SQLite dialect module, imported on first use (not by every worker)."""
    from sqlalchemy.dialects import sqlite

    return sqlite
