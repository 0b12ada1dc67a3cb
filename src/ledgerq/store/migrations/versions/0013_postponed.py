"""``jobs.postponed``: how many claims of the job a rate or concurrency limit (or a task no
worker knew yet) postponed without running it. ``attempt`` stays the fencing token, counting
every claim; the runs a person is shown are ``attempt - postponed`` of
``max_attempts - postponed`` (``Job.runs`` / ``Job.max_runs``). Rows from before this
revision count 0 postponements (their past ones cannot be told apart).

Revision ID: 0013_postponed
Revises: 0012_claimed_at
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013_postponed"
down_revision = "0012_claimed_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("postponed", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    # A plain DROP COLUMN (SQLite 3.35+): a batch copy of ``jobs`` would try to write its
    # generated column.
    op.drop_column("jobs", "postponed")
