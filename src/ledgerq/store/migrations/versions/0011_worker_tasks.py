"""``queue_workers.tasks``: the task names a worker's application registers (a JSON list),
written at registration. A worker that claims a job of a task it does not know puts the job
back while a live worker declares the task; only when none has for ``UNKNOWN_TASK_GRACE`` is
the job buried. Rows of older workers hold NULL (they declare nothing).

Revision ID: 0011_worker_tasks
Revises: 0010_assignment_key
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0011_worker_tasks"
down_revision = "0010_assignment_key"
branch_labels = None
depends_on = None

LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")


def upgrade() -> None:
    op.add_column("queue_workers", sa.Column("tasks", LongText, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("queue_workers") as batch:
        batch.drop_column("tasks")
