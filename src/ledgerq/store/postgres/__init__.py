"""The PostgreSQL driver: its statements, its psycopg fast path and its LISTEN listener."""

from ledgerq.store.postgres.postgres_driver import MAINTAIN_DEAD_TUPLES, PostgresDriver

__all__ = ["MAINTAIN_DEAD_TUPLES", "PostgresDriver"]
