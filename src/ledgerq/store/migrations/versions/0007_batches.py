"""Batches: finished items of batch jobs (``job_items``), batches of jobs with callbacks
(``batches``), and the jobs' ``items_total`` and ``batch_id`` columns.

Revision ID: 0007_batches
Revises: 0006_schedules
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0007_batches"
down_revision = "0006_schedules"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("items_total", sa.Integer, nullable=True))
    op.add_column("jobs", sa.Column("batch_id", JobId, nullable=True))
    op.create_index("ix_jobs_batch_id_state", "jobs", ["batch_id", "state"])
    op.create_table(
        "job_items",
        sa.Column("job_id", JobId, nullable=False),
        sa.Column("item_key", sa.String(255), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("result", LongText, nullable=True),
        sa.Column("finished_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "item_key", name="pk_job_items"),
    )
    op.create_table(
        "batches",
        sa.Column("id", JobId, autoincrement=True, nullable=False),
        sa.Column("size", sa.Integer, nullable=False),
        sa.Column("callbacks", LongText, nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("success_fired_at", Timestamp, nullable=True),
        sa.Column("failure_fired_at", Timestamp, nullable=True),
        sa.Column("complete_fired_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_batches"),
    )
    op.create_index("ix_batches_complete_fired_at", "batches", ["complete_fired_at"])


def downgrade() -> None:
    op.drop_index("ix_batches_complete_fired_at", table_name="batches")
    op.drop_table("batches")
    op.drop_table("job_items")
    op.drop_index("ix_jobs_batch_id_state", table_name="jobs")
    op.drop_column("jobs", "batch_id")
    op.drop_column("jobs", "items_total")
