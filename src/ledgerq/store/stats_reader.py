"""StatsReader: what a database can tell about the ledger's tables, indexes, statements and
connections (``ledgerq db stats``). This base knows nothing beyond the row counts the store
takes itself; each driver's reader (``store/*/stats.py``) says what its database can tell, and
raises ``Unavailable`` naming why for what it cannot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection


class Unavailable(Exception):  # a verdict, not a failure: it names a reason
    """The database cannot tell this (the message says why and what would enable it)."""


class StatsReader:
    """The generic reader: no sizes, no index use, no statement statistics."""

    def database(self, conn: Connection) -> dict[str, Any]:
        """The whole database: ``size_bytes`` and what else the database keeps."""
        return {}

    def tables(self, conn: Connection, names: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Per table: sizes in bytes and dead-row counts where the database keeps them."""
        return {}

    def indexes(self, conn: Connection, names: Sequence[str]) -> list[dict[str, Any]]:
        """Per index of these tables: ``table``, ``index``, ``scans``, ``size_bytes``."""
        raise Unavailable("this database does not count index use")

    def statements(
        self, conn: Connection, names: Sequence[str], limit: int
    ) -> list[dict[str, Any]]:
        """The ``limit`` slowest statements on these tables by mean time: ``query``,
        ``calls``, ``total_ms``, ``mean_ms``, ``rows``."""
        raise Unavailable("this database keeps no statement statistics")

    def connections(self, conn: Connection) -> dict[str, Any]:
        """The server's connections: in use, by state, and its limit."""
        return {}
