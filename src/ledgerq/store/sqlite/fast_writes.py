"""SQLite's single enqueue and group completion on sqlite3 directly (see ``fast.py``): the
same statements as the portable paths (``SqlJobStore``'s bulk insert, ``moves.finish`` and
``moves.retry``, the history's closing and inserting), fenced and committed the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.core.states import JobState
from ledgerq.store import dialects, moves
from ledgerq.store.job_rows import PLAIN_COLUMNS
from ledgerq.store.sqlite.fast import Compiled, RawWrites
from ledgerq.store.tables import jobs

#: The columns of ``job_rows.bulk_rows`` of a plain job (no dedupe key, deadline or time).
INSERT_COLUMNS = frozenset((*PLAIN_COLUMNS, "dedupe_key", "expires_at", "delay_s"))


class SqliteFastWrites:
    """The driver's hot writes for ``dialect`` (a SQLite driver), built on first use."""

    def __init__(self, dialect: dialects.Dialect) -> None:
        self._raw = RawWrites(dialect.engine)
        delay = sa.bindparam("delay_s", type_=sa.Float)
        insert = (
            sa.insert(jobs)
            .values(created_at=dialect.now(), run_at=dialect.now_plus(delay))
            .returning(jobs.c.id)
        )
        self._insert = Compiled(insert, sorted(INSERT_COLUMNS))
        self._finish = Compiled(moves.finish(dialect))
        self._retry = Compiled(moves.retry(dialect))
        self._ending = tuple(Compiled(s) for s in dialects.ending(dialect))

    def insert(self, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        """Insert plain job rows in one transaction; ids in input order (None: a row carries
        other columns, for the portable path)."""
        if any(row.keys() != INSERT_COLUMNS for row in rows):
            return None
        # A producer's insert skips the short-step wait: its two PRAGMAs were 11% of a single
        # enqueue's client CPU, and a producer may wait for the workers' writes in SQLite's
        # busy handler (the workers' claims and completions keep the short steps).
        with self._raw.transaction(spin=False) as conn:
            return [
                int(conn.execute(self._insert.sql, self._insert.bind(r)).fetchone()[0])
                for r in rows
            ]

    def complete(self, params: Sequence[dict[str, Any]]) -> list[bool]:
        """Write fenced outcomes (``SqlJobStore._complete_sorted``'s params) and close the
        history of those that applied, in one transaction; one bool per item."""
        with self._raw.transaction() as conn:
            applied = []
            for p in params:
                move = self._retry if p["new_state"] == JobState.FAILED.value else self._finish
                applied.append(conn.execute(move.sql, move.bind(p)).rowcount == 1)
            ends = [
                {
                    "a_job": p["claim_id"],
                    "a_attempt": p["claim_attempt"],
                    "a_outcome": p["new_state"],
                }
                for p, ok in zip(params, applied, strict=True)
                if ok
            ]
            if ends:
                for statement in self._ending:
                    conn.executemany(statement.sql, [statement.bind(e) for e in ends])
        return applied
