"""SqlDatabaseStats: ``ledgerq db stats``, the seed's ``db:performance-stats``. Exact row
counts of every ledger table, then what the database can tell through its driver's
``StatsReader`` (sizes, dead rows, index use, the slowest ledger statements, connections),
and this process's pool. Each part is read on a connection of its own, so one the role may
not read (a runtime role without access to a statistics view) is reported as unavailable with
the database's reason and the rest still shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.store.migrations.env_settings import VERSION_TABLE
from ledgerq.store.stats_reader import Unavailable
from ledgerq.store.tables import metadata
from ledgerq.store.transactions import SqlTransactions, translate_error


class SqlDatabaseStats(SqlTransactions):
    """Reads the ledger's statistics; changes nothing."""

    def collect(self, *, statements: int = 10) -> dict[str, Any]:
        """Every section as plain data: ``database`` (its kind), ``size`` (the
        database's), ``tables`` (name -> rows, sizes, dead rows), ``ledger_bytes`` (their
        sum), ``indexes``, ``statements`` (the ``statements`` slowest by mean time),
        ``connections``, ``pool``, and ``unavailable`` (section -> why not). Raise
        ``StoreError`` if the tables cannot be counted (no ledger, database down)."""
        names = sorted(metadata.tables)
        reader = self.dialect.stats_reader()
        unavailable: dict[str, str] = {}
        report: dict[str, Any] = {"database": self.dialect.name}

        def part(section: str, read: Callable[[Connection], Any], empty: Any) -> Any:
            try:
                with self.engine.connect() as conn:
                    return read(conn)
            except Unavailable as exc:
                unavailable[section] = str(exc)
            except sa.exc.DBAPIError as exc:
                reason = str(getattr(exc, "orig", exc)).strip().splitlines()
                unavailable[section] = reason[0] if reason else type(exc).__name__
            return empty

        report["size"] = part("size", reader.database, {})
        tables = {name: {"rows": n} for name, n in self._row_counts(names).items()}
        for name, facts in part("sizes", lambda c: reader.tables(c, names), {}).items():
            tables.setdefault(name, {}).update(facts)
        report["tables"] = tables
        report["ledger_bytes"] = sum(
            int(t.get("size_bytes") or 0) + int(t.get("index_bytes") or 0) for t in tables.values()
        )
        report["indexes"] = part("indexes", lambda c: reader.indexes(c, names), [])
        report["statements"] = part(
            "statements", lambda c: reader.statements(c, names, statements), []
        )
        report["connections"] = part("connections", reader.connections, {})
        report["pool"] = self._pool()
        report["unavailable"] = unavailable
        return report

    def _row_counts(self, names: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        try:
            with self._read() as conn:
                for name in names:
                    table = metadata.tables[name]
                    stmt = sa.select(sa.func.count()).select_from(table)
                    counts[name] = int(conn.execute(stmt).scalar_one())
                version = sa.table(VERSION_TABLE)
                counts[VERSION_TABLE] = int(
                    conn.execute(sa.select(sa.func.count()).select_from(version)).scalar_one()
                )
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc
        return counts

    def _pool(self) -> dict[str, Any]:
        """This process's connection pool (the CLI's own, for ``db stats``)."""
        pool = self.engine.pool
        shown: dict[str, Any] = {"class": type(pool).__name__}
        for name in ("size", "checkedout"):
            method = getattr(pool, name, None)
            if callable(method):
                shown[name] = int(method())
        return shown
