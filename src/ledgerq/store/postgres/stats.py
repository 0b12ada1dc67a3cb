"""What PostgreSQL tells ``ledgerq db stats``: sizes and dead tuples from the statistics
collector (``pg_stat_user_tables``), index scans (``pg_stat_user_indexes``), the slowest
ledger statements from ``pg_stat_statements`` when that extension is installed and preloaded,
and connections from ``pg_stat_activity``. Everything is read in the ledger's schema
(``current_schema()``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.store.stats_reader import StatsReader, Unavailable

_TABLES = sa.text(
    """
    SELECT c.relname AS name, pg_table_size(c.oid) AS size_bytes,
           pg_indexes_size(c.oid) AS index_bytes, s.n_dead_tup AS dead_rows,
           s.last_vacuum, s.last_autovacuum
    FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
    WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname = ANY(:names)
    """
)
_INDEXES = sa.text(
    """
    SELECT relname AS table, indexrelname AS index, idx_scan AS scans,
           pg_relation_size(indexrelid) AS size_bytes
    FROM pg_stat_user_indexes
    WHERE schemaname = current_schema() AND relname = ANY(:names)
    ORDER BY relname, indexrelname
    """
)
_STATEMENTS = sa.text(
    """
    SELECT left(query, 500) AS query, calls, total_exec_time AS total_ms,
           mean_exec_time AS mean_ms, rows
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND query ~* :pattern
    ORDER BY mean_exec_time DESC
    LIMIT :limit
    """
)
_CONNECTIONS = sa.text(
    """
    SELECT coalesce(state, 'unknown') AS state, count(*) AS n
    FROM pg_stat_activity
    WHERE datname = current_database() AND backend_type = 'client backend'
    GROUP BY 1
    """
)


class PostgresStats(StatsReader):
    """PostgreSQL's statistics views."""

    def database(self, conn: Connection) -> dict[str, Any]:
        size: Any = conn.exec_driver_sql("SELECT pg_database_size(current_database())").scalar()
        return {"size_bytes": int(size)}

    def tables(self, conn: Connection, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = conn.execute(_TABLES, {"names": list(names)}).mappings()
        found = {}
        for r in rows:
            found[str(r["name"])] = {
                "size_bytes": int(r["size_bytes"]),
                "index_bytes": int(r["index_bytes"]),
                "dead_rows": int(r["dead_rows"]) if r["dead_rows"] is not None else None,
                "last_vacuum": _newest(r["last_vacuum"], r["last_autovacuum"]),
            }
        return found

    def indexes(self, conn: Connection, names: Sequence[str]) -> list[dict[str, Any]]:
        rows = conn.execute(_INDEXES, {"names": list(names)}).mappings()
        return [
            {
                "table": str(r["table"]),
                "index": str(r["index"]),
                "scans": int(r["scans"] or 0),
                "size_bytes": int(r["size_bytes"]),
            }
            for r in rows
        ]

    def statements(
        self, conn: Connection, names: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        installed = conn.exec_driver_sql(
            "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
        ).first()
        if installed is None:
            raise Unavailable(
                "pg_stat_statements is not installed: add it to shared_preload_libraries,"
                " restart, and CREATE EXTENSION pg_stat_statements"
            )
        pattern = r"\m(" + "|".join(names) + r")\M"
        try:
            with conn.begin_nested():
                rows = conn.execute(_STATEMENTS, {"pattern": pattern, "limit": limit})
                found = list(rows.mappings())
        except sa.exc.DBAPIError as exc:
            # Installed but not preloaded: the view refuses to be read.
            first = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
            raise Unavailable(f"pg_stat_statements cannot be read: {first}") from None
        return [
            {
                "query": " ".join(str(r["query"]).split()),
                "calls": int(r["calls"]),
                "total_ms": round(float(r["total_ms"]), 3),
                "mean_ms": round(float(r["mean_ms"]), 3),
                "rows": int(r["rows"]),
            }
            for r in found
        ]

    def connections(self, conn: Connection) -> dict[str, Any]:
        states: Sequence[Any] = conn.execute(_CONNECTIONS).all()
        by_state = {str(s): int(n) for s, n in states}
        limit = int(conn.exec_driver_sql("SHOW max_connections").scalar_one())
        total: Any = conn.exec_driver_sql("SELECT count(*) FROM pg_stat_activity").scalar()
        return {
            "this_database": sum(by_state.values()),
            "by_state": by_state,
            "server_total": int(total),
            "max_connections": limit,
        }


def _newest(*moments: Any) -> str | None:
    present = [m for m in moments if m is not None]
    return max(present).isoformat() if present else None
