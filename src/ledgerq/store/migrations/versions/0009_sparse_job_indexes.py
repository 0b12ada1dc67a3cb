"""Sparse job indexes: ``ix_jobs_dedupe_active`` and ``ix_jobs_batch_id_state`` cover only the
rows that have a dedupe key or a batch, where the dialect allows partial indexes (PostgreSQL,
SQLite). Every job state change writes a new row version into each index that covers the row,
and most jobs have neither, so the two indexes no longer cost every transition a write.

Revision ID: 0009_sparse_job_indexes
Revises: 0008_workflows
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_sparse_job_indexes"
down_revision = "0008_workflows"
branch_labels = None
depends_on = None

_PARTIAL_DIALECTS = ("postgresql", "sqlite")


def _rebuild(*, sparse: bool) -> None:
    where = {
        "ix_jobs_dedupe_active": "dedupe_active IS NOT NULL",
        "ix_jobs_batch_id_state": "batch_id IS NOT NULL",
    }
    columns = {
        "ix_jobs_dedupe_active": ["dedupe_active"],
        "ix_jobs_batch_id_state": ["batch_id", "state"],
    }
    for name, predicate in where.items():
        op.drop_index(name, table_name="jobs")
        condition = sa.text(predicate) if sparse else None
        op.create_index(
            name,
            "jobs",
            columns[name],
            unique=name == "ix_jobs_dedupe_active",
            postgresql_where=condition,
            sqlite_where=condition,
        )


def upgrade() -> None:
    if op.get_bind().dialect.name in _PARTIAL_DIALECTS:
        _rebuild(sparse=True)


def downgrade() -> None:
    if op.get_bind().dialect.name in _PARTIAL_DIALECTS:
        _rebuild(sparse=False)
