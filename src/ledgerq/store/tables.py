"""Table definitions: the single source of DDL truth (migrations must produce exactly this).
The jobs, queue controls, fleet, coordination and limits tables are here; the scheduler's,
batches' and workflows' are in ``flow_tables.py`` and re-exported below."""

from __future__ import annotations

import sqlalchemy as sa

from ledgerq.core.states import UNFINISHED
from ledgerq.store.flow_tables import WorkflowId as WorkflowId
from ledgerq.store.flow_tables import batches as batches
from ledgerq.store.flow_tables import job_items as job_items
from ledgerq.store.flow_tables import schedule_runs as schedule_runs
from ledgerq.store.flow_tables import schedules as schedules
from ledgerq.store.flow_tables import workflow_events as workflow_events
from ledgerq.store.flow_tables import workflow_steps as workflow_steps
from ledgerq.store.flow_tables import workflows as workflows
from ledgerq.store.table_types import JobId as JobId
from ledgerq.store.table_types import LongText as LongText
from ledgerq.store.table_types import Timestamp as Timestamp
from ledgerq.store.table_types import metadata as metadata

_unfinished = ", ".join(f"'{state.value}'" for state in sorted(UNFINISHED))

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", JobId, primary_key=True, autoincrement=True),
    sa.Column("queue", sa.String(64), nullable=False),
    sa.Column("task", sa.String(200), nullable=False),
    sa.Column("args", LongText, nullable=False),
    sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("state", sa.String(16), nullable=False),
    # The fencing token: incremented by every claim, never decremented.
    sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
    sa.Column("run_at", Timestamp, nullable=False),
    sa.Column("dedupe_key", sa.String(255), nullable=True),
    # Holds dedupe_key only while the job is unfinished, so a plain unique index gives
    # "unique among unfinished jobs" on every dialect (MariaDB has no partial indexes).
    sa.Column(
        "dedupe_active",
        sa.String(255),
        sa.Computed(f"CASE WHEN state IN ({_unfinished}) THEN dedupe_key END", persisted=True),
        nullable=True,
    ),
    sa.Column("timeout_seconds", sa.Float, nullable=True),
    sa.Column("worker_id", sa.String(128), nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("started_at", Timestamp, nullable=True),  # the body's start (NULL: waiting)
    sa.Column("heartbeat_at", Timestamp, nullable=True),
    sa.Column("lease_expires_at", Timestamp, nullable=True),
    sa.Column("progress_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("result", LongText, nullable=True),
    sa.Column("error", LongText, nullable=True),
    sa.Column("parent_id", JobId, nullable=True),
    sa.Column("workflow_id", sa.String(64), nullable=True),
    sa.Column("expires_at", Timestamp, nullable=True),
    sa.Column("claimed_at", Timestamp, nullable=True),  # the current attempt's claim
    # Claims that ended without running, postponed by a limit or put back unstarted at a
    # worker's stop (each also raised max_attempts by one):
    # the runs shown are attempt - postponed of max_attempts - postponed.
    sa.Column("postponed", sa.Integer, nullable=False, server_default="0"),
    # Sparse where the dialect allows: most jobs have no dedupe key (migration 0009).
    sa.Index(
        "ix_jobs_dedupe_active",
        "dedupe_active",
        unique=True,
        postgresql_where=sa.text("dedupe_active IS NOT NULL"),
        sqlite_where=sa.text("dedupe_active IS NOT NULL"),
    ),
    # The claim's index covers only claimable rows where the dialect allows it, so finished
    # jobs never slow the hot path (PostgreSQL and SQLite; MariaDB indexes every row).
    sa.Index(
        "ix_jobs_claimable",
        "queue",
        "priority",
        "run_at",
        "id",
        postgresql_where=sa.text("state = 'queued'"),
        sqlite_where=sa.text("state = 'queued'"),
    ).ddl_if(dialect=("postgresql", "sqlite")),  # type: ignore[arg-type]  # tuples work
    # MariaDB has no partial indexes: lead with state so finished rows sit apart.
    sa.Index("ix_jobs_claimable_by_state", "state", "queue", "priority", "run_at", "id").ddl_if(
        dialect=("mysql", "mariadb")  # type: ignore[arg-type]
    ),
    sa.Index(
        "ix_jobs_waiting",
        "run_at",
        postgresql_where=sa.text("state IN ('scheduled', 'failed')"),
        sqlite_where=sa.text("state IN ('scheduled', 'failed')"),
    ),
    sa.Index("ix_jobs_state_queue", "state", "queue"),
    sa.Index(
        "ix_jobs_running_worker",
        "worker_id",
        postgresql_where=sa.text("state = 'running'"),
        sqlite_where=sa.text("state = 'running'"),
    ),
    # SQLite: ids are never handed out twice (migration 0020).
    sqlite_autoincrement=True,
)

# How many items a job's ``ctx.items()`` was given (NULL: the job has no items).
jobs.append_column(sa.Column("items_total", sa.Integer, nullable=True))
# The batch a job belongs to (NULL: none); its outcome may fire the batch's callbacks.
jobs.append_column(sa.Column("batch_id", JobId, nullable=True))
sa.Index(
    "ix_jobs_batch_id_state",
    jobs.c.batch_id,
    jobs.c.state,
    postgresql_where=sa.text("batch_id IS NOT NULL"),
    sqlite_where=sa.text("batch_id IS NOT NULL"),
)

# A row per paused queue: the claim skips a queue that has a row here (see jobs.py).
paused_queues = sa.Table(
    "paused_queues",
    metadata,
    sa.Column("queue", sa.String(64), primary_key=True),
    sa.Column("paused_at", Timestamp, nullable=False),
)

# Which job an HTTP ``Idempotency-Key`` produced, and a hash of the request that used it.
idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("key", sa.String(255), primary_key=True),
    sa.Column("job_id", JobId, nullable=False),
    sa.Column("request_hash", sa.String(64), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    # The retention deletes the keys of the jobs it deletes (migration 0022).
    sa.Index("ix_idempotency_keys_job_id", "job_id"),
)

# The jobs a producer waits on: a completion on PostgreSQL notifies ``ledgerq_finished`` for
# these only (``statements.COMPLETE_GROUP``); ``waiter`` tells two waits of one job apart.
job_waiters = sa.Table(
    "job_waiters",
    metadata,
    sa.Column("job_id", JobId, primary_key=True),
    sa.Column("waiter", sa.String(36), primary_key=True),
    sa.Column("since", Timestamp, nullable=False),
)

# Job rows the retention pruner deleted, per queue, task and state (``expired``: never
# started, past ``expires_at``); lifetime figures = these + the rows still present. Written
# only by the pruner, in the transaction of its delete, never on a job's hot path.
lifetime_totals = sa.Table(
    "lifetime_totals",
    metadata,
    sa.Column("queue", sa.String(64), primary_key=True),
    sa.Column("task", sa.String(200), primary_key=True),
    sa.Column("state", sa.String(16), primary_key=True),
    sa.Column("count", sa.BigInteger, nullable=False),
)

# -- the fleet: registry, health, assignment history and failover record ---------------------

WorkerId = sa.String(128)

queue_workers = sa.Table(
    "queue_workers",
    metadata,
    sa.Column("id", WorkerId, primary_key=True),
    sa.Column("hostname", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("queues", sa.String(2000), nullable=False),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("version", sa.String(32), nullable=False),
    # active | stopped (clean exit) | dead (failed over)
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("heartbeat_at", Timestamp, nullable=False),
    sa.Column("stopped_at", Timestamp, nullable=True),
    # NULL, 'graceful' or 'immediate': read by the worker's heartbeat, so a stop reaches a
    # worker on any host that can reach the database.
    sa.Column("stop_requested", sa.String(16), nullable=True),
    sa.Column("jobs_in_flight", sa.Integer, nullable=False, server_default="0"),
    sa.Column("jobs_processed", sa.Integer, nullable=False, server_default="0"),
    # Jobs finished per second over the worker's recent window: peers compare it to share fairly.
    sa.Column("jobs_per_second", sa.Float, nullable=False, server_default="0"),
    sa.Column("last_fetch_at", Timestamp, nullable=True),
    # The task names the worker's application registers, a JSON list (NULL: an older worker,
    # which declares none): whether a live worker knows a task decides an unknown-task job.
    sa.Column("tasks", LongText, nullable=True),
    sa.Index("ix_queue_workers_state_heartbeat_at", "state", "heartbeat_at"),
)

worker_health_checks = sa.Table(
    "worker_health_checks",
    metadata,
    sa.Column("id", JobId, primary_key=True, autoincrement=True),
    sa.Column("worker_id", WorkerId, nullable=False),
    sa.Column("checked_at", Timestamp, nullable=False),
    sa.Column("healthy", sa.Boolean, nullable=False),
    sa.Column("db_latency_ms", sa.Float, nullable=True),
    sa.Column("transport_latency_ms", sa.Float, nullable=True),
    sa.Column("memory_mb", sa.Float, nullable=True),
    sa.Column("cpu_percent", sa.Float, nullable=True),
    sa.Column("jobs_in_flight", sa.Integer, nullable=False),
    sa.Column("last_fetch_age_seconds", sa.Float, nullable=True),
    sa.Column("problems", sa.String(1000), nullable=True),
    sa.Index("ix_worker_health_checks_worker_id_checked_at", "worker_id", "checked_at"),
    sa.Index("ix_worker_health_checks_checked_at", "checked_at"),
)

job_assignments = sa.Table(
    "job_assignments",
    metadata,
    # Keyed by the attempt itself: each ended attempt inserts one row, with one index entry.
    sa.Column("job_id", JobId, primary_key=True, autoincrement=False),
    sa.Column("attempt", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("worker_id", WorkerId, nullable=False),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("ended_at", Timestamp, nullable=True),
    # succeeded | failed | dead | cancelled | requeued | lost | failed_over | orphaned
    sa.Column("outcome", sa.String(16), nullable=True),
)

failover_events = sa.Table(
    "failover_events",
    metadata,
    sa.Column("id", JobId, primary_key=True, autoincrement=True),
    sa.Column("worker_id", WorkerId, nullable=False),
    sa.Column("detected_by", sa.String(160), nullable=False),
    sa.Column("last_heartbeat_at", Timestamp, nullable=True),
    sa.Column("detected_at", Timestamp, nullable=False),
    sa.Column("jobs_requeued", sa.Integer, nullable=False),
    sa.Column("jobs_dead", sa.Integer, nullable=False),
    sa.Column("job_ids", LongText, nullable=False),
    sa.Column("duration_ms", sa.Float, nullable=False),
    sa.Index("ix_failover_events_detected_at", "detected_at"),
)

# -- coordination: distributed locks and unique-job windows (see docs/coordination.md) --------

# One row per lock name, never deleted: ``token`` is the name's fencing counter and only grows.
# ``owner``/``expires_at`` are NULL while nobody holds the lock.
distributed_locks = sa.Table(
    "distributed_locks",
    metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("owner", sa.String(160), nullable=True),
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("acquired_at", Timestamp, nullable=True),
    sa.Column("expires_at", Timestamp, nullable=True),
)

# A dedupe key taken for a time window (``enqueue(dedupe_key=..., dedupe_for=...)``): until
# ``expires_at`` every enqueue with the key returns ``job_id`` as a duplicate.
job_dedupe_windows = sa.Table(
    "job_dedupe_windows",
    metadata,
    sa.Column("dedupe_key", sa.String(255), primary_key=True),
    sa.Column("job_id", JobId, nullable=True),
    sa.Column("expires_at", Timestamp, nullable=False),
)

# -- fleet-wide limits: rate windows, concurrency slots, circuit breakers (core/limits.py) ----

LimitName = sa.String(200)

# One row per limit name. A rate limit's row carries its GCRA state: the theoretical arrival
# time of the next admission (epoch microseconds, database clock); a concurrency limit's row is
# the lock its slot decisions take.
limit_keys = sa.Table(
    "limit_keys",
    metadata,
    sa.Column("name", LimitName, primary_key=True),
    sa.Column("tat_us", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("updated_at", Timestamp, nullable=False),
)

# A slot per running attempt of a concurrency-limited task or key. A slot whose attempt is no
# longer running (its worker died and failover put the job back) is freed by the next acquire.
concurrency_slots = sa.Table(
    "concurrency_slots",
    metadata,
    sa.Column("name", LimitName, primary_key=True),
    sa.Column("job_id", JobId, primary_key=True),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("acquired_at", Timestamp, nullable=False),
    sa.Index("ix_concurrency_slots_job_id", "job_id"),
)

circuit_breakers = sa.Table(
    "circuit_breakers",
    metadata,
    sa.Column("name", LimitName, primary_key=True),
    # closed | half_open | open
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("opened_at", Timestamp, nullable=True),
    sa.Column("trial_started_at", Timestamp, nullable=True),
    sa.Column("updated_at", Timestamp, nullable=False),
)
