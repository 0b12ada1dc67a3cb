"""``lifetime_totals``: the job rows the retention pruner deleted, counted per queue, task and
state in the same transaction as the delete, so the lifetime figures (enqueued, succeeded,
dead since the beginning; the SMS system's ``sms:stats``) = these + the rows still present
survive retention. No job's hot path writes here.

Revision ID: 0014_lifetime_totals
Revises: 0013_postponed
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014_lifetime_totals"
down_revision = "0013_postponed"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "lifetime_totals",
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("count", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint("queue", "task", "state", name="pk_lifetime_totals"),
    )


def downgrade() -> None:
    op.drop_table("lifetime_totals")
