"""Fleet-wide limits: rate windows and lock rows, concurrency slots, circuit breakers.

Revision ID: 0005_limits
Revises: 0004_locks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0005_limits"
down_revision = "0004_locks"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "limit_keys",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("tat_us", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_limit_keys"),
    )
    op.create_table(
        "concurrency_slots",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("job_id", JobId, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("acquired_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("name", "job_id", name="pk_concurrency_slots"),
    )
    op.create_index("ix_concurrency_slots_job_id", "concurrency_slots", ["job_id"])
    op.create_table(
        "circuit_breakers",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("failures", sa.Integer, nullable=False, server_default="0"),
        sa.Column("opened_at", Timestamp, nullable=True),
        sa.Column("trial_started_at", Timestamp, nullable=True),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_circuit_breakers"),
    )


def downgrade() -> None:
    op.drop_table("circuit_breakers")
    op.drop_index("ix_concurrency_slots_job_id", table_name="concurrency_slots")
    op.drop_table("concurrency_slots")
    op.drop_table("limit_keys")
