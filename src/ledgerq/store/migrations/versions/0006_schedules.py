"""The scheduler: cron schedules and their fired ticks.

Revision ID: 0006_schedules
Revises: 0005_limits
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0006_schedules"
down_revision = "0005_limits"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("tz", sa.String(64), nullable=False),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("args", LongText, nullable=False),
        sa.Column("queue", sa.String(64), nullable=True),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("missed", sa.String(8), nullable=False),
        sa.Column("max_catchup", sa.Integer, nullable=False),
        sa.Column("overlap", sa.String(8), nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("last_tick", Timestamp, nullable=True),
        sa.Column("next_tick", Timestamp, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_schedules"),
    )
    op.create_table(
        "schedule_runs",
        sa.Column("id", RowId, nullable=False, autoincrement=True),
        sa.Column("schedule", sa.String(200), nullable=False),
        sa.Column("tick", Timestamp, nullable=False),
        sa.Column("job_id", RowId, nullable=True),
        sa.Column("executed_by", sa.String(160), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_schedule_runs"),
    )
    op.create_index(
        "ix_schedule_runs_schedule_tick", "schedule_runs", ["schedule", "tick"], unique=True
    )


def downgrade() -> None:
    op.drop_table("schedule_runs")
    op.drop_table("schedules")
