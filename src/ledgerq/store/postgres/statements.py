"""PostgreSQL's hand-written hot-path statements: one statement text each, whatever the batch
size, so psycopg prepares it once (see ``PostgresDriver``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa

from ledgerq.store.job_rows import PLAIN_COLUMNS
from ledgerq.store.tables import jobs

#: The LISTEN/NOTIFY channel that wakes idle workers; the payload is the queue name.
NOTIFY_CHANNEL = "ledgerq_jobs"
#: The channel a group completion notifies with each finished job a producer waits on
#: (``app.jobs.wait``), as ``<schema>:<id>`` (ledgers in other schemas share the channel).
FINISHED_CHANNEL = "ledgerq_finished"

# Rows travel as one JSON document: psycopg's text-array dumper escapes every element with a
# regular expression, which cost more client CPU than the rest of a bulk enqueue together.
INSERT_COLUMNS = (*PLAIN_COLUMNS, "delay_s")


def _type(column: str) -> str:
    """The SQL type a new job's ``column`` travels as: strings as text (the insert checks
    their lengths), the rest as the column's own type (FLOAT is PostgreSQL's float8)."""
    kind = jobs.c[column].type
    return "text" if isinstance(kind, sa.String) else str(kind.compile())


_PLAIN_TYPES = ", ".join(f"{c} {_type(c)}" for c in PLAIN_COLUMNS)
INSERT_NOTIFY = sa.text(
    "WITH ins AS ("
    f"INSERT INTO jobs ({', '.join(PLAIN_COLUMNS)}, run_at, created_at)"
    f" SELECT {', '.join(f'v.{c}' for c in PLAIN_COLUMNS)},"
    " clock_timestamp() + make_interval(secs => v.delay_s), clock_timestamp()"
    f" FROM json_to_recordset(CAST(:rows AS json)) AS v({_PLAIN_TYPES}, delay_s float8)"
    " RETURNING id, queue, state)"
    # The insert wakes idle workers in the same statement (one round trip, atomic in
    # autocommit); the uncorrelated subquery runs once, and NOTIFY is delivered at commit.
    " SELECT ins.id, (SELECT count(pg_notify('" + NOTIFY_CHANNEL + "', q.queue))"
    " FROM (SELECT DISTINCT queue FROM ins WHERE state = 'queued') AS q) AS woken FROM ins"
)


# One job (``enqueue``'s usual case) as bind parameters: PostgreSQL parses no JSON document
# and plans no set-returning function for it. Prepared once; a one-job enqueue took 85-100 us
# less than through INSERT_NOTIFY (loaded 2-core machine, psycopg prepared, autocommit).
INSERT_ONE_NOTIFY = sa.text(
    "WITH ins AS ("
    f"INSERT INTO jobs ({', '.join(PLAIN_COLUMNS)}, run_at, created_at)"
    f" VALUES ({', '.join(f'CAST(:{c} AS {_type(c)})' for c in PLAIN_COLUMNS)},"
    " clock_timestamp() + make_interval(secs => CAST(:delay_s AS float8)), clock_timestamp())"
    " RETURNING id, queue, state)"
    " SELECT ins.id, (SELECT count(pg_notify('" + NOTIFY_CHANNEL + "', woken.queue))"
    " FROM ins AS woken WHERE woken.state = 'queued') AS woken FROM ins"
)


# Statements that write several running jobs take their row locks in ascending id order, so two
# of them never deadlock: a worker's heartbeat and its completer write overlapping sets at once,
# and in whatever order the plan reads rows the two could each hold a row the other waits for
# (PostgreSQL then breaks the cycle only after deadlock_timeout, 1 s, failing one of them).
# The locks are taken in a materialized CTE, read once: a locking subquery inside the UPDATE
# itself may be rescanned per row and, meeting rows the UPDATE already changed, PostgreSQL 15
# was seen spinning on it at full CPU.
#
# The plans must not depend on the table's statistics, which are stale after every burst:
# - the per-job values travel as arrays in one row ``p``, and each row finds its entry by
#   ``array_position`` of its id in ``p.ids`` and is written only if the entry's attempt is its
#   current one (a stale attempt's entry matches nothing). The ids of one statement are
#   therefore unique (``unique_id_parts`` splits a group that holds two attempts of one job).
#   A join with ``unnest(...)`` was planned as a nested loop that rescanned the values once per
#   job (7.7 ms for 100 jobs). The entry was found by "id:attempt" texts before: building and
#   comparing them cost PostgreSQL 80 us per completed job in a drain's groups of about 130,
#   as each row looks its entry up once per value it writes;
# - the rows are reached by ``id = ANY(p.ids)`` on the primary key. The state test is wrapped in
#   ``IS TRUE`` so the partial index of running jobs cannot serve it: every job that ever ran
#   leaves a dead entry there until vacuum, and the planner, believing it small, read all of it.
# The locks are taken first, by the ``locked`` CTE, read once through an InitPlan. The UPDATE
# re-reads each row (after waiting, the newest version), so no position or tid is carried over.
def _locked_in_id_order(arrays: str) -> str:
    return (
        "p AS MATERIALIZED (SELECT CAST(:ids AS bigint[]) AS ids,"
        " CAST(:attempts AS int[]) AS attempts" + arrays + "),"
        # Not joined with p: the lock would copy p's arrays into every row it sorts.
        " locked AS MATERIALIZED (SELECT l.id FROM jobs AS l"
        " WHERE l.id = ANY(CAST(:ids AS bigint[])) ORDER BY l.id FOR NO KEY UPDATE)"
    )


# The position of a job's entry among the statement's (NULL: none).
_ENTRY = "array_position(p.ids, jobs.id)"

_RUNNING_LOCKED = (
    " FROM p WHERE jobs.id = ANY(p.ids) AND p.attempts[" + _ENTRY + "] = jobs.attempt"
    " AND (jobs.state = 'running') IS TRUE AND (SELECT count(*) FROM locked) >= 0"
)


def _entry_of(array: str) -> str:
    return "p." + array + "[" + _ENTRY + "]"


# The attempt's history row (``job_assignments``) is written once, when the attempt ends, by
# the statement that ends it: the worker and start come from the job's row. Inserting it at the
# claim and closing it here cost PostgreSQL more than the claim and completion themselves (two
# row versions and six index entries per attempt). The conflict clause closes a row that a
# worker of an earlier release inserted at its claim; a closed row keeps its first end.
_HISTORY_OF_DONE = (
    " history AS (INSERT INTO job_assignments"
    " (job_id, attempt, worker_id, started_at, ended_at, outcome)"
    " SELECT done.id, done.attempt, coalesce(done.worker_id, '(no worker)'),"
    " coalesce(done.claimed_at, done.started_at, clock_timestamp()), clock_timestamp(),"
    " done.state FROM done"
    " ON CONFLICT (job_id, attempt) DO UPDATE"
    " SET ended_at = excluded.ended_at, outcome = excluded.outcome"
    " WHERE job_assignments.ended_at IS NULL)"
)

COMPLETE_GROUP = sa.text(
    "WITH "
    + _locked_in_id_order(
        ", CAST(:states AS text[]) AS states,"
        " CAST(:results AS text[]) AS results, CAST(:errors AS text[]) AS errors,"
        " CAST(:delays AS float8[]) AS delays, CAST(:rans AS float8[]) AS rans"
    )
    + ", done AS (UPDATE jobs SET state = "
    + _entry_of("states")
    + ","
    " result = CASE WHEN " + _entry_of("states") + " = 'failed' THEN jobs.result"
    " ELSE " + _entry_of("results") + " END,"
    " error = " + _entry_of("errors") + ","
    " finished_at = CASE WHEN " + _entry_of("states") + " = 'failed' THEN NULL"
    " ELSE clock_timestamp() END,"
    " run_at = CASE WHEN " + _entry_of("states") + " = 'failed'"
    " THEN clock_timestamp() + make_interval(secs => " + _entry_of("delays") + ")"
    " ELSE jobs.run_at END,"
    " lease_expires_at = NULL,"
    # The body's real start, from how long it ran, unless a start mark wrote it already.
    " started_at = coalesce(jobs.started_at,"
    " clock_timestamp() - make_interval(secs => "
    + _entry_of("rans")
    + "), jobs.claimed_at)"
    + _RUNNING_LOCKED
    + " RETURNING jobs.id, jobs.attempt, jobs.state, jobs.worker_id, jobs.claimed_at,"
    " jobs.started_at)," + _HISTORY_OF_DONE + ","
    # A NOTIFY (delivered at commit) for each finished job (not a retry) that a producer
    # waits on (``app.jobs.wait`` registers it in job_waiters): only those, as a NOTIFY
    # serializes commits. Nobody waiting: a probe of an empty table. Referenced by the SELECT,
    # so it runs.
    " finished AS (SELECT count(pg_notify('" + FINISHED_CHANNEL + "',"
    " current_schema() || ':' || done.id::text)) AS n"
    " FROM done JOIN job_waiters w ON w.job_id = done.id WHERE done.state <> 'failed')"
    " SELECT done.id, done.attempt FROM done, finished"
)

# Writes the history rows of attempts whose outcomes were written by other statements in the
# same transaction (batch members and workflow steps), reading worker and start from the jobs.
END_ASSIGNMENTS = sa.text(
    "WITH done AS (SELECT v.id, v.attempt, v.state, j.worker_id, j.claimed_at, j.started_at"
    " FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS int[]), CAST(:outcomes AS text[]))"
    " AS v(id, attempt, state) JOIN jobs AS j ON j.id = v.id),"
    + _HISTORY_OF_DONE
    + " SELECT count(*) FROM done"
)

HEARTBEAT_GROUP = sa.text(
    "WITH " + _locked_in_id_order("") + " UPDATE jobs SET heartbeat_at = clock_timestamp(),"
    " lease_expires_at = clock_timestamp() + make_interval(secs => CAST(:lease AS float8))"
    + _RUNNING_LOCKED
    + " RETURNING jobs.id, jobs.attempt"
)

# One statement text for any number of hints (an IN list would be new SQL per length, parsed
# and planned again each time); the paused check is correlated with the row's queue.
# The state and queue tests are wrapped in ``IS TRUE`` so that no index but the primary key can
# serve them: after a burst into an empty table, stale statistics made the planner scan the
# whole claimable index (every queued row) for each claim of 16 ids: 5 ms instead of 0.2 ms.
# The attempt's history row is written when the attempt ends (see ``_HISTORY_OF_DONE``).
CLAIM_HINTED = sa.text(
    "WITH claimed AS ("
    "UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, worker_id = :worker,"
    " claimed_at = clock_timestamp(), started_at = NULL, heartbeat_at = clock_timestamp(),"
    " lease_expires_at = clock_timestamp() + make_interval(secs => CAST(:lease AS float8)),"
    " finished_at = NULL"
    " WHERE jobs.id IN (SELECT j.id FROM jobs AS j WHERE j.id = ANY(CAST(:ids AS bigint[]))"
    " AND (j.state = 'queued') IS TRUE AND j.run_at <= clock_timestamp()"
    " AND (j.queue = ANY(CAST(:queues AS text[]))) IS TRUE"
    " AND NOT EXISTS (SELECT 1 FROM paused_queues AS p WHERE p.queue = j.queue)"
    " ORDER BY j.priority, j.run_at, j.id LIMIT :lim FOR UPDATE SKIP LOCKED)"
    " RETURNING jobs.*)"
    " SELECT * FROM claimed"
)

# Starts and ends of attempts in one statement: a new attempt is inserted, an open one closed;
# a closed one keeps its first end.
UPSERT_ASSIGNMENTS = sa.text(
    "INSERT INTO job_assignments (job_id, attempt, worker_id, started_at, ended_at, outcome)"
    " SELECT v.job_id, v.attempt, v.worker_id, coalesce(v.started_at, clock_timestamp()),"
    " CASE WHEN v.outcome IS NULL THEN NULL ELSE clock_timestamp() END, v.outcome"
    " FROM json_to_recordset(CAST(:rows AS json)) AS v(job_id bigint, attempt int,"
    " worker_id text, started_at timestamptz, outcome text)"
    " ON CONFLICT (job_id, attempt) DO UPDATE SET outcome = excluded.outcome,"
    " ended_at = excluded.ended_at"
    " WHERE job_assignments.ended_at IS NULL AND excluded.outcome IS NOT NULL"
)


def insert_values(rows: Sequence[dict[str, Any]]) -> dict[str, str]:
    """``INSERT_NOTIFY``'s one JSON document from the store's row dicts (with ``delay_s``)."""
    return {"rows": json.dumps([{c: r[c] for c in INSERT_COLUMNS} for r in rows])}


def int_array(values: Iterable[int]) -> str:
    """A PostgreSQL array literal of integers (cast in the statement). Built by hand: psycopg's
    list dumper costs more client CPU than the rest of a hot-path call."""
    return "{" + ",".join([str(int(v)) for v in values]) + "}"


def float_array(values: Iterable[float]) -> str:
    """A PostgreSQL array literal of floats (cast in the statement)."""
    return "{" + ",".join([repr(float(v)) for v in values]) + "}"


def float_or_null_array(values: Iterable[float | None]) -> str:
    """A PostgreSQL array literal of floats and NULLs (cast in the statement)."""
    return "{" + ",".join(["NULL" if v is None else repr(float(v)) for v in values]) + "}"


def text_array(values: Iterable[str | None]) -> str:
    """A PostgreSQL array literal of texts and NULLs (cast in the statement)."""
    return "{" + ",".join([_quoted(v) for v in values]) + "}"


def _quoted(value: str | None) -> str:
    if value is None:
        return "NULL"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def complete_group_values(params: Sequence[dict[str, Any]]) -> dict[str, str]:
    """``COMPLETE_GROUP``'s arrays from the store's outcome parameters."""
    return {
        **attempt_keys((p["claim_id"], p["claim_attempt"]) for p in params),
        "states": text_array(p["new_state"] for p in params),
        "results": text_array(p["new_result"] for p in params),
        "errors": text_array(p["new_error"] for p in params),
        "delays": float_array(p["retry_delay"] for p in params),
        "rans": float_or_null_array(p["ran_s"] for p in params),
    }


def attempt_keys(claims: Iterable[tuple[int, int]]) -> dict[str, str]:
    """The ``:ids`` and ``:attempts`` arrays of statements that lock running jobs (each id
    once: see ``unique_id_parts``)."""
    pairs = [(int(job_id), int(attempt)) for job_id, attempt in claims]
    return {
        "ids": int_array(job_id for job_id, _ in pairs),
        "attempts": int_array(attempt for _, attempt in pairs),
    }


def unique_id_parts(keys: Sequence[tuple[int, int]]) -> list[list[int]]:
    """The positions of ``keys`` ((id, attempt) pairs), in order, split into parts in which
    each job id appears once: one part unless a group holds two attempts of one job (a stale
    attempt's outcome beside the current one's), which one statement cannot tell apart."""
    parts: list[list[int]] = []
    seen: list[set[int]] = []
    for position, (job_id, _) in enumerate(keys):
        free = next((n for n, ids in enumerate(seen) if job_id not in ids), None)
        if free is None:
            free = len(parts)
            parts.append([])
            seen.append(set())
        parts[free].append(position)
        seen[free].add(job_id)
    return parts


def heartbeat_values(
    ids: Sequence[int], attempts: Sequence[int], lease_seconds: float
) -> dict[str, Any]:
    """``HEARTBEAT_GROUP``'s parameters."""
    return {**attempt_keys(zip(ids, attempts, strict=True)), "lease": float(lease_seconds)}


def applied(keys: Iterable[tuple[int, int]], rows: Iterable[Sequence[Any]]) -> list[bool]:
    """For each (id, attempt) key, whether a returned row (id, attempt) confirms its write."""
    done = {(int(row[0]), int(row[1])) for row in rows}
    return [key in done for key in keys]


def hinted_claim_values(params: dict[str, Any], queues: Sequence[str]) -> dict[str, Any]:
    """``CLAIM_HINTED``'s parameters from the store's claim parameters."""
    return {
        "ids": int_array(params["hint_ids"]),
        "queues": text_array(queues),
        "lim": params["claim_limit"],
        "worker": params["claim_worker"],
        "lease": params["lease_s"],
    }
