"""MariaDB and MySQL compare the ledger's text exactly: every ledgerq table becomes
``utf8mb4_bin``.

Their usual default collation (``utf8mb4_general_ci``) compares text without case or accents.
Keys and names were then equal where PostgreSQL and SQLite tell them apart: a job whose dedupe
key differed from an unfinished job's only in case was taken for its duplicate and never
stored, a worker of queue ``emails`` claimed the jobs of ``Emails``, and an HTTP
``Idempotency-Key`` answered for another request's job. ``CONVERT TO`` rewrites each table; on
a large ``jobs`` table that takes a while and blocks writes to it, so run it in a quiet hour
(docs/operations.md, "Migrations that rewrite a table").

A table a later revision creates on MariaDB names ``mysql_collate="utf8mb4_bin"`` itself
(``tests/migrations`` checks every table). The downgrade converts back to the character set's
default collation; it fails if two keys now differ only in case (a unique index refuses them).

Revision ID: 0021_exact_text_on_mariadb
Revises: 0020_sqlite_job_ids
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_exact_text_on_mariadb"
down_revision = "0020_sqlite_job_ids"
branch_labels = None
depends_on = None

#: The ledger's tables at this revision (Alembic's own version table is left as it is).
TABLES = (
    "batches",
    "circuit_breakers",
    "concurrency_slots",
    "distributed_locks",
    "failover_events",
    "idempotency_keys",
    "job_assignments",
    "job_dedupe_windows",
    "job_items",
    "job_waiters",
    "jobs",
    "lifetime_totals",
    "limit_keys",
    "paused_queues",
    "queue_workers",
    "schedule_runs",
    "schedules",
    "worker_health_checks",
    "workflow_events",
    "workflow_steps",
    "workflows",
)


def upgrade() -> None:
    _convert("COLLATE utf8mb4_bin")


def downgrade() -> None:
    _convert("")


def _convert(collate: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name not in ("mysql", "mariadb"):
        return
    present = set(sa.inspect(bind).get_table_names())
    for table in TABLES:
        if table in present:
            bind.exec_driver_sql(
                f"ALTER TABLE `{table}` CONVERT TO CHARACTER SET utf8mb4 {collate}".rstrip()
            )
