"""What SQLite tells ``ledgerq db stats``: each table's and index's bytes from the ``dbstat``
virtual table where the library has it (else the file's pages only), and the file's free
pages (SQLite's dead space, returned by ``VACUUM``). It counts neither index use nor
statements, and has no server connections: the pool of this process is all there is."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.store.stats_reader import StatsReader, Unavailable

_SIZES = "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"
_OWNERS = "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index'"


class SqliteStats(StatsReader):
    """dbstat and the file's page counts."""

    def database(self, conn: Connection) -> dict[str, Any]:
        page = int(conn.exec_driver_sql("PRAGMA page_size").scalar_one())
        pages = int(conn.exec_driver_sql("PRAGMA page_count").scalar_one())
        free_pages = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
        return {"size_bytes": pages * page, "free_bytes": free_pages * page}

    def tables(self, conn: Connection, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        try:
            rows: Sequence[Any] = conn.exec_driver_sql(_SIZES).all()
            sizes = {str(n): int(b) for n, b in rows}
        except sa.exc.OperationalError:
            return {}  # this SQLite has no dbstat: the file's size is all it can tell
        indexes: Sequence[Any] = conn.exec_driver_sql(_OWNERS).all()
        owners = {str(i): str(t) for i, t in indexes}
        index_bytes: dict[str, int] = defaultdict(int)
        for index, table in owners.items():
            index_bytes[table] += sizes.get(index, 0)
        return {
            name: {"size_bytes": sizes.get(name, 0), "index_bytes": index_bytes[name]}
            for name in names
        }

    def indexes(self, conn: Connection, names: Sequence[str]) -> list[dict[str, Any]]:
        raise Unavailable("SQLite does not count index use")

    def statements(
        self, conn: Connection, names: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        raise Unavailable("SQLite keeps no statement statistics")
