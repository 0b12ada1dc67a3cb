"""``job_assignments`` is keyed by what identifies an attempt, (job_id, attempt): the surrogate
``id`` column and the ``worker_id`` index go. Every attempt a worker ends inserts one history
row; the two cost that insert two of its three index entries (and a sequence step), and no
statement read them. Per-worker counts group over the whole table either way.

The table is rewritten on MariaDB and SQLite (their primary key is the table's order); on
PostgreSQL the unique index becomes the primary key in place.

Revision ID: 0010_assignment_key
Revises: 0009_sparse_job_indexes
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010_assignment_key"
down_revision = "0009_sparse_job_indexes"
branch_labels = None
depends_on = None

_TABLE = "job_assignments"
_PK = "pk_job_assignments"
_UNIQUE = "ix_job_assignments_job_id_attempt"
_BY_WORKER = "ix_job_assignments_worker_id"
RowId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.drop_index(_BY_WORKER, table_name=_TABLE)
    if dialect == "postgresql":
        op.drop_constraint(_PK, _TABLE, type_="primary")
        op.execute(f"ALTER TABLE {_TABLE} ADD CONSTRAINT {_PK} PRIMARY KEY USING INDEX {_UNIQUE}")
        op.drop_column(_TABLE, "id")
    elif dialect in ("mysql", "mariadb"):
        # One statement: InnoDB rebuilds the table once, and an AUTO_INCREMENT column may not
        # outlive its key even for a moment.
        op.execute(
            f"ALTER TABLE {_TABLE} DROP COLUMN id, ADD PRIMARY KEY (job_id, attempt),"
            f" DROP INDEX {_UNIQUE}"
        )
    else:
        with op.batch_alter_table(_TABLE, recreate="always") as batch:
            batch.drop_index(_UNIQUE)
            batch.drop_column("id")
            batch.create_primary_key(_PK, ["job_id", "attempt"])


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    if dialect == "postgresql":
        op.drop_constraint(_PK, _TABLE, type_="primary")
        op.execute(f"ALTER TABLE {_TABLE} ADD COLUMN id BIGSERIAL")
        op.create_primary_key(_PK, _TABLE, ["id"])
    elif dialect in ("mysql", "mariadb"):
        op.execute(
            f"ALTER TABLE {_TABLE} DROP PRIMARY KEY,"
            " ADD COLUMN id BIGINT NOT NULL AUTO_INCREMENT FIRST, ADD PRIMARY KEY (id)"
        )
    else:
        # SQLite: a new table whose INTEGER primary key numbers the rows again.
        columns = "job_id, attempt, worker_id, started_at, ended_at, outcome"
        op.execute(f"ALTER TABLE {_TABLE} RENAME TO _{_TABLE}_keyed")
        op.create_table(
            _TABLE,
            sa.Column("id", RowId, nullable=False),
            sa.Column("job_id", RowId, nullable=False),
            sa.Column("attempt", sa.Integer, nullable=False),
            sa.Column("worker_id", sa.String(128), nullable=False),
            sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("outcome", sa.String(16), nullable=True),
            sa.PrimaryKeyConstraint("id", name=_PK),
        )
        op.execute(
            f"INSERT INTO {_TABLE} ({columns}) SELECT {columns} FROM _{_TABLE}_keyed"
            " ORDER BY started_at, job_id, attempt"
        )
        op.execute(f"DROP TABLE _{_TABLE}_keyed")
    op.create_index(_UNIQUE, _TABLE, ["job_id", "attempt"], unique=True)
    op.create_index(_BY_WORKER, _TABLE, ["worker_id"])
