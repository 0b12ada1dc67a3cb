"""Queue controls: paused queues and the HTTP API's idempotency keys.

Revision ID: 0003_queue_controls
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0003_queue_controls"
down_revision = "0002_fleet"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "paused_queues",
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("paused_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("queue", name="pk_paused_queues"),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("job_id", JobId, nullable=False),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("key", name="pk_idempotency_keys"),
    )


def downgrade() -> None:
    op.drop_table("idempotency_keys")
    op.drop_table("paused_queues")
