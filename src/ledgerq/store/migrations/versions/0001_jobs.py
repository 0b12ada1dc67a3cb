"""The jobs ledger.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
UNFINISHED = "'failed', 'held', 'queued', 'running', 'scheduled'"


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", JobId, primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("args", LongText, nullable=False),
        sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
        sa.Column("run_at", Timestamp, nullable=False),
        sa.Column("dedupe_key", sa.String(255), nullable=True),
        sa.Column(
            "dedupe_active",
            sa.String(255),
            sa.Computed(f"CASE WHEN state IN ({UNFINISHED}) THEN dedupe_key END", persisted=True),
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
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
    )
    op.create_index("ix_jobs_dedupe_active", "jobs", ["dedupe_active"], unique=True)
    if op.get_bind().dialect.name == "postgresql":
        # A queue table churns: every job is updated several times. Vacuum it early and
        # without throttling so dead index entries do not pile up in front of the claim.
        op.execute(
            "ALTER TABLE jobs SET (autovacuum_vacuum_scale_factor = 0.02,"
            " autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.05,"
            " autovacuum_vacuum_cost_delay = 0, fillfactor = 90)"
        )
    op.create_index("ix_jobs_state_queue", "jobs", ["state", "queue"])
    if op.get_bind().dialect.name in ("mysql", "mariadb"):
        op.create_index(
            "ix_jobs_claimable_by_state", "jobs", ["state", "queue", "priority", "run_at", "id"]
        )
        op.create_index("ix_jobs_waiting", "jobs", ["run_at"])
        op.create_index("ix_jobs_running_worker", "jobs", ["worker_id"])
        return
    partial = {
        "claimable": "state = 'queued'",
        "waiting": "state IN ('scheduled', 'failed')",
        "running_worker": "state = 'running'",
    }
    columns = {
        "claimable": ["queue", "priority", "run_at", "id"],
        "waiting": ["run_at"],
        "running_worker": ["worker_id"],
    }
    for name, where in partial.items():
        op.create_index(
            f"ix_jobs_{name}",
            "jobs",
            columns[name],
            postgresql_where=sa.text(where),
            sqlite_where=sa.text(where),
        )


def downgrade() -> None:
    op.drop_table("jobs")
