"""Coordination: distributed locks (fencing counters) and unique-job windows.

Revision ID: 0004_locks
Revises: 0003_queue_controls
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0004_locks"
down_revision = "0003_queue_controls"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "distributed_locks",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(160), nullable=True),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("acquired_at", Timestamp, nullable=True),
        sa.Column("expires_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("name", name="pk_distributed_locks"),
    )
    op.create_table(
        "job_dedupe_windows",
        sa.Column("dedupe_key", sa.String(255), nullable=False),
        sa.Column("job_id", JobId, nullable=True),
        sa.Column("expires_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("dedupe_key", name="pk_job_dedupe_windows"),
    )


def downgrade() -> None:
    op.drop_table("job_dedupe_windows")
    op.drop_table("distributed_locks")
