"""An index on ``idempotency_keys.job_id``: the retention deletes the HTTP Idempotency-Keys of
the jobs it deletes (``job_id IN (...)``, once per batch), which read the whole table without
it. The table is written once per keyed HTTP enqueue, so the index costs the hot path nothing.

Revision ID: 0022_idempotency_key_job_index
Revises: 0021_exact_text_on_mariadb
"""

from __future__ import annotations

from alembic import op

revision = "0022_idempotency_key_job_index"
down_revision = "0021_exact_text_on_mariadb"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_idempotency_keys_job_id", "idempotency_keys", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_job_id", table_name="idempotency_keys")
