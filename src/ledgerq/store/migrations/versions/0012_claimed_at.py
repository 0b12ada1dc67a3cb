"""``jobs.claimed_at``: when the current attempt was claimed. ``started_at`` becomes when its
body started (NULL while a claimed job waits in a worker's prefetch), written by the worker
shortly after the start or with the outcome, so claimed and running jobs can be told apart and
durations use the real start. Rows of running jobs claimed before this revision keep their
claim time as their start.

Revision ID: 0012_claimed_at
Revises: 0011_worker_tasks
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0012_claimed_at"
down_revision = "0011_worker_tasks"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("claimed_at", Timestamp, nullable=True))
    op.execute("UPDATE jobs SET claimed_at = started_at WHERE started_at IS NOT NULL")


def downgrade() -> None:
    op.execute("UPDATE jobs SET started_at = claimed_at WHERE started_at IS NULL")
    # A plain DROP COLUMN (SQLite 3.35+): a batch copy of ``jobs`` would try to write its
    # generated column.
    op.drop_column("jobs", "claimed_at")
