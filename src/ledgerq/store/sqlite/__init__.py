"""The SQLite driver."""

from ledgerq.store.sqlite.driver import SqliteDriver

__all__ = ["SqliteDriver"]
