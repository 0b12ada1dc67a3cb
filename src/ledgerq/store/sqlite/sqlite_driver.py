"""The SQLite driver: one writer at a time (``BEGIN IMMEDIATE``, see engine.py), so a claim is
one ``UPDATE .. RETURNING`` (SQLite 3.35+) under the write lock and needs no row locks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection

from ledgerq.store.dialects import Dialect, EngineSettings, Sessions, insert_or_skip_with
from ledgerq.store.sqlite import write_lock
from ledgerq.store.sqlite.fast_writes import SqliteFastWrites
from ledgerq.store.sqlite.stats import SqliteStats
from ledgerq.store.stats_reader import StatsReader
from ledgerq.store.tables import jobs


class SqliteDriver(Dialect):
    """SQLite over the standard library's sqlite3."""

    name = "sqlite"
    _format = "%Y-%m-%d %H:%M:%f000"  # matches SQLAlchemy's stored text, to the millisecond

    def __init__(self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> None:
        super().__init__(engine, relaxed_engine)
        self._fast: SqliteFastWrites | None = None

    @classmethod
    def normalize_url(cls, url: sa.URL) -> sa.URL:
        return write_lock.check_url(url)

    @classmethod
    def engine_options(cls, url: sa.URL, asked: EngineSettings) -> tuple[sa.URL, dict[str, Any]]:
        url, options = super().engine_options(url, asked)
        return url, {**options, "connect_args": {"timeout": 30, "check_same_thread": False}}

    @classmethod
    def configure_engine(cls, engine: sa.Engine) -> None:
        write_lock.configure(engine)

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.strftime(self._format, "now")

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        modifier = sa.func.printf("%+.6f seconds", sa.cast(seconds, sa.Float))
        return sa.func.strftime(self._format, "now", modifier)

    def epoch_us(self) -> sa.ColumnElement[Any]:
        julian = sa.func.julianday("now") - 2440587.5
        return sa.cast(julian * 86_400_000_000, sa.BigInteger)

    def epoch_minute(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        # strftime('%s') reads the stored text (fractions ignored); integer division floors.
        return sa.cast(sa.func.strftime("%s", value), sa.Integer) // 60

    # The write lock, held for the whole transaction, already serialises what others lock.
    def locking(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        return stmt

    def skipping_locked(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        return stmt

    # The extra condition would also steer the planner off the primary key.
    rechecks_candidates = False

    inserts_alone = True

    def insert_alone(self, tx: Sessions, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        # On sqlite3 directly (fast.py): a single enqueue is one short transaction of its own.
        return self._fast_writes().insert(rows)

    def complete_alone(self, tx: Sessions, params: Sequence[dict[str, Any]]) -> list[bool] | None:
        # On sqlite3 directly: one transaction per group, no SQLAlchemy execution per job.
        return self._fast_writes().complete(params)

    def _fast_writes(self) -> SqliteFastWrites:
        if self._fast is None:
            self._fast = SqliteFastWrites(self)
        return self._fast

    def stats_reader(self) -> StatsReader:
        return SqliteStats()

    def _insert_ignore(self) -> Any:
        return sqlite.insert(jobs).on_conflict_do_nothing()

    def insert_or_skip(self, conn: Connection, table: sa.Table, row: dict[str, Any]) -> bool:
        return insert_or_skip_with(sqlite.insert, conn, table, row)
