"""Inserts keyed by an idempotency key (the enqueue spool's, ``core/spool.py``): a group of
jobs, each created at most once per key, in a handful of statements whatever its size.

Invariant: a key maps to one job in ``job_dedupe_windows`` from the commit that created the job
until the window expires. The keys' window rows are inserted in the jobs' own transaction, so a
second insert of a key, after the first committed, finds its holder and creates nothing; one
racing the first (two drainers) fails on the key's primary key and its transaction rolls back
whole, and its retry finds the holders. The job rows themselves carry no dedupe key, so they
take the plain bulk insert.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import errors
from ledgerq.core.job import EnqueueResult, NewJob
from ledgerq.store.dialects import Dialect
from ledgerq.store.tables import job_dedupe_windows

w = job_dedupe_windows


def insert_keyed(
    conn: Connection,
    d: Dialect,
    jobs: Sequence[NewJob],
    insert_bulk: Callable[[Connection, Sequence[NewJob]], list[int]],
) -> list[EnqueueResult]:
    """Insert ``jobs`` (each with an ``idempotency_key`` and no ``dedupe_key``) unless their
    key already holds a job: those are duplicates of it. ``insert_bulk`` inserts plain jobs
    and returns their ids in order."""
    keys = [str(job.idempotency_key) for job in jobs]
    # An expired window holds nothing; clear it so the key can be taken again below.
    conn.execute(sa.delete(w).where(w.c.dedupe_key.in_(keys), w.c.expires_at <= d.now()))
    found: Sequence[Any] = conn.execute(
        sa.select(w.c.dedupe_key, w.c.job_id).where(w.c.dedupe_key.in_(keys))
    ).all()
    holders: dict[str, int | None] = {
        str(row[0]): None if row[1] is None else int(row[1]) for row in found
    }
    new = [job for job in jobs if job.idempotency_key not in holders]
    if new:
        conn.execute(
            sa.insert(w).values(
                dedupe_key=sa.bindparam("k"),
                expires_at=d.now_plus(sa.bindparam("window_s", type_=sa.Float)),
            ),
            [{"k": job.idempotency_key, "window_s": job.idempotency_for_seconds} for job in new],
        )
        ids = insert_bulk(conn, new)
        conn.execute(
            sa.update(w)
            .where(w.c.dedupe_key == sa.bindparam("k"))
            .values(job_id=sa.bindparam("j")),
            [{"k": job.idempotency_key, "j": job_id} for job, job_id in zip(new, ids, strict=True)],
        )
        holders.update(
            {str(job.idempotency_key): job_id for job, job_id in zip(new, ids, strict=True)}
        )
    created = {str(job.idempotency_key) for job in new}
    results = []
    for key in keys:
        job_id = holders[key]
        if job_id is None:  # a window taken by a dedupe_for enqueue of the same text
            raise errors.StoreError(f"idempotency key {key!r} is held by no job")
        results.append(EnqueueResult(job_id, duplicate=key not in created))
    return results
