"""Workflows: DAGs of steps (``workflows``, ``workflow_steps``) and their event feed.

Revision ID: 0008_workflows
Revises: 0007_batches
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = "0008_workflows"
down_revision = "0007_batches"
branch_labels = None
depends_on = None

Timestamp = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
LongText = sa.Text().with_variant(mysql.LONGTEXT(), "mysql", "mariadb")
WorkflowId = sa.String(64)


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("id", WorkflowId, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("on_failure", sa.String(16), nullable=False),
        sa.Column("steps_total", sa.Integer, nullable=False),
        sa.Column("steps_done", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.Column("last_progress_at", Timestamp, nullable=False),
        sa.Column("finished_at", Timestamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_workflows"),
    )
    op.create_index(
        "ix_workflows_state_last_progress_at", "workflows", ["state", "last_progress_at"]
    )
    op.create_table(
        "workflow_steps",
        sa.Column("workflow_id", WorkflowId, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("task", sa.String(200), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("args", LongText, nullable=False),
        sa.Column("priority", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
        sa.Column("timeout_seconds", sa.Float, nullable=True),
        sa.Column("depends_on", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("job_id", RowId, nullable=True),
        sa.PrimaryKeyConstraint("workflow_id", "name", name="pk_workflow_steps"),
    )
    op.create_table(
        "workflow_events",
        sa.Column("id", RowId, autoincrement=True, nullable=False),
        sa.Column("workflow_id", WorkflowId, nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("step", sa.String(64), nullable=True),
        sa.Column("job_id", RowId, nullable=True),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_workflow_events"),
    )
    op.create_index("ix_workflow_events_workflow_id_id", "workflow_events", ["workflow_id", "id"])


def downgrade() -> None:
    op.drop_table("workflow_events")
    op.drop_table("workflow_steps")
    op.drop_table("workflows")
