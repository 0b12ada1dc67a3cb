"""PostgreSQL's bulk enqueue through ``COPY``: a large batch of plain jobs is written in one
transaction of three statements instead of one ``INSERT ... SELECT FROM json_to_recordset``.

1. ``RESERVE`` takes the batch's ids from the jobs' sequence (one ``nextval`` per row), reads
   the database clock once, and queues the ``NOTIFY`` of the batch's queues (delivered at
   commit, so no worker wakes before the rows are visible);
2. ``COPY jobs FROM STDIN`` writes the rows with those ids, as one text buffer built here;
3. ``COMMIT`` makes them durable together.

``COPY`` returns no ids, hence the reservation: ids come from the same sequence as every
other insert's, ascending in the batch's order. Each row's ``created_at`` is the database
clock read by ``RESERVE`` and its ``run_at`` that plus the job's delay (the one-statement
insert reads the clock per row; they differ by the time the batch takes to write).

Faster for large batches (the server parses no JSON document and plans no ``INSERT``, and
building the text costs the client less than the JSON did); a batch below ``COPY_MIN_ROWS``
keeps the one-statement insert, whose single round trip wins there."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

from ledgerq.store.job_rows import PLAIN_COLUMNS
from ledgerq.store.postgres.fast import FastStatements
from ledgerq.store.postgres.statements import NOTIFY_CHANNEL, text_array

#: Batches of at least this many rows go through COPY.
COPY_MIN_ROWS = 100

# One row: the ids as an array (one value to decode, not a row per id), the clock, and the
# NOTIFY count. The sequence is looked up once: the uncorrelated scalar subquery is an
# InitPlan, where a FROM-clause lookup ran per row and cost five times the nextval calls.
RESERVE = (
    "SELECT array_agg(nextval((SELECT CAST(pg_get_serial_sequence('jobs', 'id') AS regclass))))"
    ", clock_timestamp(),"
    " (SELECT count(pg_notify('" + NOTIFY_CHANNEL + "', q))"
    " FROM unnest(CAST(%(queues)s AS text[])) AS q)"
    " FROM generate_series(1, %(n)s)"
)
COPY = f"COPY jobs (id, {', '.join(PLAIN_COLUMNS)}, run_at, created_at) FROM STDIN"
_NULL = "\\N"
_ESCAPED = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def insert_by_copy(fast: FastStatements, rows: Sequence[dict[str, Any]]) -> list[int]:
    """Insert plain rows (the store's row dicts with ``delay_s``, no dedupe key, deadline or
    explicit time) and wake the workers of their ``queued`` rows' queues; ids in input order."""
    queues = sorted({r["queue"] for r in rows if r["state"] == "queued"})
    with fast.transaction() as cursor:
        cursor.execute(
            RESERVE, {"queues": text_array(queues), "n": len(rows)}, prepare=fast.prepares
        )
        reserved_ids, now, _ = cursor.fetchone()
        ids = sorted(reserved_ids)
        text = _copy_text(rows, ids, now)
        with cursor.copy(COPY) as copy:
            copy.write(text)
    return ids


#: The columns a row's text shares with others of the same batch (all but id and args).
_SHARED = itemgetter(
    "queue", "task", "priority", "state", "max_attempts", "timeout_seconds", "delay_s"
)


def _copy_text(rows: Sequence[dict[str, Any]], ids: list[int], now: datetime) -> str:
    """The rows in COPY's text format: tab-separated, ``\\N`` for NULL, backslash escapes.
    The columns around ``args`` are formatted once per distinct set (a bulk enqueue's jobs
    mostly share all of them), so a row costs its id, its arguments and two joins."""
    created = now.isoformat()
    around: dict[tuple[Any, ...], tuple[str, str]] = {}
    lines = []
    for job_id, row in zip(ids, rows, strict=True):
        shared = _SHARED(row)
        parts = around.get(shared)
        if parts is None:
            parts = around[shared] = _around_args(shared, now, created)
        lines.append(f"{job_id}{parts[0]}{_text(row['args'])}{parts[1]}")
    return "".join(lines)


def _around_args(shared: tuple[Any, ...], now: datetime, created: str) -> tuple[str, str]:
    """A row's text before ``args`` (after its id) and after it."""
    queue, task, priority, state, max_attempts, timeout, delay = shared
    due = created if delay == 0 else (now + timedelta(seconds=delay)).isoformat()
    timeout_text = _NULL if timeout is None else repr(float(timeout))
    return (
        f"\t{_text(queue)}\t{_text(task)}\t",
        f"\t{int(priority)}\t{state}\t{int(max_attempts)}\t{timeout_text}\t{due}\t{created}\n",
    )


def _text(value: str) -> str:
    # Most values need no escape; the check is cheaper than the translation.
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_ESCAPED)
    return value
