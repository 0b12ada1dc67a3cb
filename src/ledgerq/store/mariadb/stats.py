"""What MySQL/MariaDB tells ``ledgerq db stats``: sizes from ``information_schema.tables``
(InnoDB keeps no dead rows in the table: its ``data_free`` is the free space a rebuild would
return, and the undo history length the purge backlog), index use and the slowest ledger
statements from ``performance_schema`` when it is on (MariaDB ships with it off), and
connections from the server's status counters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.store.stats_reader import StatsReader, Unavailable

_TABLES = sa.text(
    """
    SELECT table_name AS name, data_length AS size_bytes, index_length AS index_bytes,
           data_free AS free_bytes
    FROM information_schema.tables
    WHERE table_schema = DATABASE() AND table_name IN :names
    """
).bindparams(sa.bindparam("names", expanding=True))
_INDEXES = sa.text(
    """
    SELECT object_name AS tbl, index_name AS idx, count_read AS scans
    FROM performance_schema.table_io_waits_summary_by_index_usage
    WHERE object_schema = DATABASE() AND index_name IS NOT NULL AND object_name IN :names
    ORDER BY object_name, index_name
    """
).bindparams(sa.bindparam("names", expanding=True))
_INDEX_SIZES = sa.text(
    """
    SELECT table_name AS tbl, index_name AS idx, stat_value * @@innodb_page_size AS size_bytes
    FROM mysql.innodb_index_stats
    WHERE database_name = DATABASE() AND stat_name = 'size'
    """
)
# SUM/AVG_TIMER_WAIT are picoseconds.
_STATEMENTS = sa.text(
    """
    SELECT LEFT(digest_text, 500) AS query, count_star AS calls,
           sum_timer_wait / 1e9 AS total_ms, avg_timer_wait / 1e9 AS mean_ms,
           sum_rows_sent + sum_rows_affected AS n_rows
    FROM performance_schema.events_statements_summary_by_digest
    WHERE schema_name = DATABASE() AND digest_text REGEXP :pattern
    ORDER BY avg_timer_wait DESC
    LIMIT :limit
    """
)


def _performance_schema_on(conn: Connection) -> None:
    if not conn.exec_driver_sql("SELECT @@performance_schema").scalar():
        raise Unavailable("performance_schema is off: start the server with performance_schema=ON")


class MariadbStats(StatsReader):
    """information_schema, performance_schema and the status counters."""

    def database(self, conn: Connection) -> dict[str, Any]:
        # InnoDB's dead rows wait in the undo history until purged: its length is the backlog.
        try:
            with conn.begin_nested():
                backlog: Any = conn.exec_driver_sql(
                    "SELECT count FROM information_schema.innodb_metrics"
                    " WHERE name = 'trx_rseg_history_len'"
                ).scalar()
        except sa.exc.DBAPIError:
            return {}  # the role may not read innodb_metrics (PROCESS privilege)
        return {} if backlog is None else {"purge_backlog_rows": int(backlog)}

    def tables(self, conn: Connection, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        rows = conn.execute(_TABLES, {"names": list(names)}).mappings()
        found: dict[str, dict[str, Any]] = {
            str(r["name"]): {
                "size_bytes": int(r["size_bytes"] or 0),
                "index_bytes": int(r["index_bytes"] or 0),
                "free_bytes": int(r["free_bytes"] or 0),
            }
            for r in rows
        }
        return found

    def indexes(self, conn: Connection, names: Sequence[str]) -> list[dict[str, Any]]:
        _performance_schema_on(conn)
        rows = list(conn.execute(_INDEXES, {"names": list(names)}).mappings())
        sizes: dict[tuple[str, str], int] = {}
        try:
            with conn.begin_nested():
                for r in conn.execute(_INDEX_SIZES).mappings():
                    sizes[(str(r["tbl"]), str(r["idx"]))] = int(r["size_bytes"])
        except sa.exc.DBAPIError:
            pass  # mysql.innodb_index_stats is not readable by every role: sizes unknown
        return [
            {
                "table": str(r["tbl"]),
                "index": str(r["idx"]),
                "scans": int(r["scans"] or 0),
                "size_bytes": sizes.get((str(r["tbl"]), str(r["idx"]))),
            }
            for r in rows
        ]

    def statements(
        self, conn: Connection, names: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        _performance_schema_on(conn)
        pattern = r"\b(" + "|".join(names) + r")\b"
        rows = conn.execute(_STATEMENTS, {"pattern": pattern, "limit": limit}).mappings()
        return [
            {
                "query": " ".join(str(r["query"]).split()),
                "calls": int(r["calls"]),
                "total_ms": round(float(r["total_ms"]), 3),
                "mean_ms": round(float(r["mean_ms"]), 3),
                "rows": int(r["n_rows"]),
            }
            for r in rows
        ]

    def connections(self, conn: Connection) -> dict[str, Any]:
        counters: Sequence[Any] = conn.exec_driver_sql(
            "SHOW GLOBAL STATUS WHERE Variable_name IN"
            " ('Threads_connected', 'Threads_running', 'Max_used_connections')"
        ).all()
        status = {str(name): value for name, value in counters}
        mine: Any = conn.exec_driver_sql(
            "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE()"
        ).scalar()
        return {
            "this_database": int(mine),
            "server_total": int(status.get("Threads_connected", 0)),
            "running": int(status.get("Threads_running", 0)),
            "max_used": int(status.get("Max_used_connections", 0)),
            "max_connections": int(conn.exec_driver_sql("SELECT @@max_connections").scalar_one()),
        }
