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
from typing import Any

from ledgerq.store.job_rows import PLAIN_COLUMNS
from ledgerq.store.postgres.fast import FastStatements
from ledgerq.store.postgres.statements import NOTIFY_CHANNEL, text_array

#: Batches of at least this many rows go through COPY.
COPY_MIN_ROWS = 100

RESERVE = (
    "SELECT nextval(s.seq), clock_timestamp(),"
    " (SELECT count(pg_notify('" + NOTIFY_CHANNEL + "', q))"
    " FROM unnest(CAST(%(queues)s AS text[])) AS q)"
    " FROM (SELECT CAST(pg_get_serial_sequence('jobs', 'id') AS regclass) AS seq) AS s,"
    " generate_series(1, %(n)s)"
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
        reserved = cursor.fetchall()
        ids = sorted(int(row[0]) for row in reserved)
        text = _copy_text(rows, ids, reserved[0][1])
        with cursor.copy(COPY) as copy:
            copy.write(text)
    return ids


def _copy_text(rows: Sequence[dict[str, Any]], ids: list[int], now: datetime) -> str:
    """The rows in COPY's text format: tab-separated, ``\\N`` for NULL, backslash escapes."""
    created = now.isoformat()
    run_at = {0.0: created}
    lines = []
    for job_id, row in zip(ids, rows, strict=True):
        delay = row["delay_s"]
        due = run_at.get(delay)
        if due is None:
            due = run_at[delay] = (now + timedelta(seconds=delay)).isoformat()
        timeout = row["timeout_seconds"]
        lines.append(
            f"{job_id}\t{_text(row['queue'])}\t{_text(row['task'])}\t{_text(row['args'])}\t"
            f"{int(row['priority'])}\t{row['state']}\t{int(row['max_attempts'])}\t"
            f"{_NULL if timeout is None else repr(float(timeout))}\t{due}\t{created}\n"
        )
    return "".join(lines)


def _text(value: str) -> str:
    # Most values need no escape; the check is cheaper than the translation.
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_ESCAPED)
    return value
