"""The MySQL/MariaDB driver: SKIP LOCKED, but no UPDATE .. RETURNING and no LIMIT in
IN-subqueries, so a claim is ``SELECT .. FOR UPDATE SKIP LOCKED`` then ``UPDATE`` in one
transaction."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from ledgerq.store.dialects import Dialect, EngineSettings, Sessions
from ledgerq.store.engine import IDLE_IN_TRANSACTION_SECONDS
from ledgerq.store.mariadb.stats import MariadbStats
from ledgerq.store.stats_reader import StatsReader
from ledgerq.store.tables import jobs

_ER_DUP_ENTRY = 1062


def _ledger_lock_name(name: str) -> sa.ColumnElement[str]:
    """A MySQL user lock's name for ``name`` in this ledger: ``GET_LOCK`` names are
    server-wide, so the database goes into it (hashed: names are capped at 64 characters)."""
    database = sa.func.left(sa.func.sha1(sa.func.coalesce(sa.func.database(), "")), 16)
    return sa.func.concat(name, ":", database)


def _duplicate(exc: sa.exc.IntegrityError) -> bool:
    return bool(getattr(exc.orig, "args", (None,))[0] == _ER_DUP_ENTRY)


class MariadbDriver(Dialect):
    """MySQL and MariaDB over PyMySQL."""

    name = "mysql"

    @classmethod
    def normalize_url(cls, url: sa.URL) -> sa.URL:
        if "+" not in url.drivername:
            url = url.set(drivername=f"{url.get_backend_name()}+pymysql")
        return url.update_query_dict({"charset": "utf8mb4"})

    @classmethod
    def engine_options(cls, url: sa.URL, asked: EngineSettings) -> tuple[sa.URL, dict[str, Any]]:
        url, options = super().engine_options(url, asked)
        # READ COMMITTED avoids the gap locks that make SKIP LOCKED claims deadlock.
        options["isolation_level"] = "READ COMMITTED"
        if url.get_backend_name() == "mariadb":
            # MariaDB's name for PostgreSQL's idle-in-transaction guard (MySQL has none).
            timeout = f"SET SESSION idle_transaction_timeout = {IDLE_IN_TRANSACTION_SECONDS}"
            options["connect_args"] = {"init_command": timeout}
        return url, options

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.utc_timestamp(6)

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        micros = sa.func.round(sa.cast(seconds, sa.Float) * 1_000_000)
        return sa.func.timestampadd(sa.literal_column("MICROSECOND"), micros, self.now())

    def epoch_us(self) -> sa.ColumnElement[Any]:
        return sa.cast(sa.func.unix_timestamp(sa.func.now(6)) * 1_000_000, sa.BigInteger)

    def epoch_minute(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        # Not UNIX_TIMESTAMP(): it reads a DATETIME in the session's time zone; the stored
        # times are UTC whatever that zone is.
        epoch: sa.ColumnElement[Any] = sa.literal_column("'1970-01-01 00:00:00'")
        return sa.func.timestampdiff(sa.literal_column("MINUTE"), epoch, value)

    def build_claim(self, picked: sa.Select[Any], values: dict[str, Any]) -> Any:
        ids: sa.BindParameter[Any] = sa.bindparam("claimed_ids", expanding=True)
        return (
            picked.with_for_update(skip_locked=True),
            sa.update(jobs).where(jobs.c.id.in_(ids)).values(values),
            sa.select(*jobs.c).where(jobs.c.id.in_(ids)),
        )

    def claim(
        self, tx: Sessions, built: Any, params: dict[str, Any]
    ) -> Sequence[Mapping[Any, Any]]:
        # Several statements: they need a real transaction.
        with tx._begin() as conn:
            return self.run_claim(conn, built, params)

    def run_claim(
        self, conn: Connection, built: Any, params: dict[str, Any]
    ) -> Sequence[RowMapping]:
        pick, update, fetch = built
        ids: list[Any] = list(conn.execute(pick, params).scalars())
        if not ids:
            return []
        conn.execute(update, {**params, "claimed_ids": ids})
        return conn.execute(fetch, {"claimed_ids": ids}).mappings().all()

    def max_connections(self, conn: Connection) -> int | None:
        return int(conn.exec_driver_sql("SELECT @@max_connections").scalar_one())

    def stats_reader(self) -> StatsReader:
        return MariadbStats()

    def try_lock(self, conn: Connection, name: str) -> bool:
        return conn.execute(sa.select(sa.func.get_lock(_ledger_lock_name(name), 0))).scalar() == 1

    def unlock(self, conn: Connection, name: str) -> None:
        conn.execute(sa.select(sa.func.release_lock(_ledger_lock_name(name))))

    def insert_or_skip(self, conn: Connection, table: sa.Table, row: dict[str, Any]) -> bool:
        try:
            with conn.begin_nested():  # see insert_unless_duplicate
                conn.execute(sa.insert(table).values(row))
        except sa.exc.IntegrityError as exc:
            if _duplicate(exc):
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
            if _duplicate(exc):
                return None
            raise
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])
