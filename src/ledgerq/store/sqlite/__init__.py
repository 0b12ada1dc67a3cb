"""The SQLite driver."""

from ledgerq.store.sqlite.sqlite_driver import SqliteDriver

__all__ = ["SqliteDriver"]
