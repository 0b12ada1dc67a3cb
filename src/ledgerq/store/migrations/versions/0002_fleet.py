"""The fleet: worker registry, health checks, job assignment history, failover events.

Revision ID: 0002_fleet
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0002_fleet"
down_revision = "0001"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
WorkerId = sa.String(128)


def upgrade() -> None:
    op.create_table(
        "queue_workers",
        sa.Column("id", WorkerId, nullable=False),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("queues", sa.String(2000), nullable=False),
        sa.Column("concurrency", sa.Integer, nullable=False),
        sa.Column("version", sa.String(32), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("heartbeat_at", Timestamp, nullable=False),
        sa.Column("stopped_at", Timestamp, nullable=True),
        sa.Column("stop_requested", sa.String(16), nullable=True),
        sa.Column("jobs_in_flight", sa.Integer, nullable=False, server_default="0"),
        sa.Column("jobs_processed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("jobs_per_second", sa.Float, nullable=False, server_default="0"),
        sa.Column("last_fetch_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_queue_workers"),
    )
    op.create_index(
        "ix_queue_workers_state_heartbeat_at", "queue_workers", ["state", "heartbeat_at"]
    )
    op.create_table(
        "worker_health_checks",
        sa.Column("id", RowId, primary_key=True, autoincrement=True),
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
        sa.PrimaryKeyConstraint("id", name="pk_worker_health_checks"),
    )
    op.create_index(
        "ix_worker_health_checks_worker_id_checked_at",
        "worker_health_checks",
        ["worker_id", "checked_at"],
    )
    op.create_index("ix_worker_health_checks_checked_at", "worker_health_checks", ["checked_at"])
    op.create_table(
        "job_assignments",
        sa.Column("id", RowId, primary_key=True, autoincrement=True),
        sa.Column("job_id", RowId, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("worker_id", WorkerId, nullable=False),
        sa.Column("started_at", Timestamp, nullable=False),
        sa.Column("ended_at", Timestamp, nullable=True),
        sa.Column("outcome", sa.String(16), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_job_assignments"),
    )
    op.create_index(
        "ix_job_assignments_job_id_attempt", "job_assignments", ["job_id", "attempt"], unique=True
    )
    op.create_index("ix_job_assignments_worker_id", "job_assignments", ["worker_id"])
    op.create_table(
        "failover_events",
        sa.Column("id", RowId, primary_key=True, autoincrement=True),
        sa.Column("worker_id", WorkerId, nullable=False),
        sa.Column("detected_by", sa.String(160), nullable=False),
        sa.Column("last_heartbeat_at", Timestamp, nullable=True),
        sa.Column("detected_at", Timestamp, nullable=False),
        sa.Column("jobs_requeued", sa.Integer, nullable=False),
        sa.Column("jobs_dead", sa.Integer, nullable=False),
        sa.Column("job_ids", LongText, nullable=False),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_failover_events"),
    )
    op.create_index("ix_failover_events_detected_at", "failover_events", ["detected_at"])


def downgrade() -> None:
    for table in ("failover_events", "job_assignments", "worker_health_checks", "queue_workers"):
        op.drop_table(table)
