"""``job_waiters``: the jobs a producer waits on (``app.jobs.wait``), so a completion sends
PostgreSQL's ``ledgerq_finished`` NOTIFY only for them (a NOTIFY serializes commits: one per
finished job would cost every drain). A row lives as long as its wait; rows of waiters that
died are deleted after a day by the next wait. Other databases keep the table empty.

Revision ID: 0019_job_waiters
Revises: 0016_sql_enqueue
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0019_job_waiters"
down_revision = "0016_sql_enqueue"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JobId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "job_waiters",
        sa.Column("job_id", JobId, nullable=False),
        sa.Column("waiter", sa.String(36), nullable=False),
        sa.Column("since", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("job_id", "waiter"),
    )


def downgrade() -> None:
    op.drop_table("job_waiters")
