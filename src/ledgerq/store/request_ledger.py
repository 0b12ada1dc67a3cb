"""SqlRequestLedger: the ``Idempotency-Key`` records of bulk enqueues, written in the same
transaction as the jobs they answer (``idempotency_keys``: a key, its job, the request's hash),
so a request is either stored with its key or not at all."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core.operations import IdempotentRequest
from ledgerq.core.producers import KeyTaken
from ledgerq.store.tables import idempotency_keys
from ledgerq.store.transactions import SqlTransactions, db_time

#: Keys looked up per statement (an IN list stays well under every driver's limits).
_CHUNK = 500


class SqlRequestLedger(SqlTransactions):
    """RequestLedger over the ``idempotency_keys`` table."""

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A durable transaction (the engine enqueues use); commits at the end of the block."""
        with self._begin() as conn:
            yield conn

    def remember_requests(
        self, records: Sequence[IdempotentRequest], *, connection: object
    ) -> None:
        """Insert ``records`` in ``connection``'s transaction; ``KeyTaken`` if a key exists.
        A concurrent transaction inserting the same key makes this one wait for it (the
        primary key's lock), then fail: the loser rolls back and replays the winner."""
        if not records:
            return
        assert isinstance(connection, Connection)
        now = db_time(connection.execute(sa.select(self.dialect.now())).scalar_one())
        rows = [
            {"key": r.key, "job_id": r.job_id, "request_hash": r.request_hash, "created_at": now}
            for r in records
        ]
        try:
            connection.execute(idempotency_keys.insert(), rows)
        except sa.exc.IntegrityError as exc:
            raise KeyTaken(f"Idempotency-Key record {records[0].key!r} exists") from exc

    def find_requests(self, keys: Sequence[str]) -> list[IdempotentRequest | None]:
        """The record of each key, None where there is none, in the order of ``keys``."""
        found: dict[str, IdempotentRequest] = {}
        with self._read() as conn:
            for start in range(0, len(keys), _CHUNK):
                chunk = list(keys[start : start + _CHUNK])
                stmt = sa.select(idempotency_keys).where(idempotency_keys.c.key.in_(chunk))
                rows: Sequence[Any] = conn.execute(stmt).mappings().all()
                for row in rows:
                    key = str(row["key"])
                    found[key] = IdempotentRequest(
                        key, int(row["job_id"]), str(row["request_hash"])
                    )
        return [found.get(key) for key in keys]
