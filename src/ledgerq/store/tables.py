"""Table definitions: the single source of DDL truth (migrations must produce exactly this)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from ledgerq.core.states import UNFINISHED

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# MySQL/MariaDB DATETIME has no fraction unless asked; all stored times are UTC.
Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
# SQLite only auto-increments an INTEGER PRIMARY KEY.
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")

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
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("heartbeat_at", Timestamp, nullable=True),
    sa.Column("lease_expires_at", Timestamp, nullable=True),
    sa.Column("progress_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("result", LongText, nullable=True),
    sa.Column("error", LongText, nullable=True),
    sa.Column("parent_id", JobId, nullable=True),
    sa.Column("workflow_id", sa.String(64), nullable=True),
    sa.Column("expires_at", Timestamp, nullable=True),
    sa.Index("ix_jobs_dedupe_active", "dedupe_active", unique=True),
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
)
