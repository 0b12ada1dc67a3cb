"""SQLite job ids are never reused: ``jobs.id`` becomes ``AUTOINCREMENT``.

Without it SQLite hands out the highest id in the table plus one, so once the newest jobs were
deleted (retention, ``queue cleanup``, ``job delete``) their ids came back for new jobs, which
then inherited the old jobs' items, attempt history and HTTP idempotency keys. PostgreSQL's
identity and MariaDB's AUTO_INCREMENT never go back. SQLite cannot change a column's key in
place, so the table is rebuilt: the same definition with the key ``AUTOINCREMENT``, every row
copied (the generated column recomputes), the indexes made again. Ids already reused before
this revision stay as they are.

Revision ID: 0020_sqlite_job_ids
Revises: 0019_job_waiters
"""

from __future__ import annotations

import re

from alembic import op

revision = "0020_sqlite_job_ids"
down_revision = "0019_job_waiters"
branch_labels = None
depends_on = None

_KEY_COLUMN = re.compile(r"\bid INTEGER NOT NULL,")
_HEAD = re.compile(r'^CREATE TABLE "?jobs"? \(')
_KEY_CONSTRAINT = re.compile(r",\s*CONSTRAINT pk_jobs PRIMARY KEY \(id\)")


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)


def _rebuild(*, autoincrement: bool) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "sqlite":
        return
    table_sql: str = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
    ).scalar_one()
    if autoincrement:
        new_sql, keys = _KEY_COLUMN.subn(
            "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,", table_sql, count=1
        )
        new_sql, constraints = _KEY_CONSTRAINT.subn("", new_sql, count=1)
        if keys != 1 or constraints != 1:
            raise RuntimeError("unexpected definition of table jobs; not rebuilt")
    else:
        new_sql = table_sql.replace(
            "id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,", "id INTEGER NOT NULL,", 1
        ).rstrip()
        new_sql = new_sql[: new_sql.rindex(")")] + ",\n\tCONSTRAINT pk_jobs PRIMARY KEY (id)\n)"
    # A renamed table's definition reads ``CREATE TABLE "jobs"``.
    new_sql, heads = _HEAD.subn("CREATE TABLE jobs_rebuilt (", new_sql, count=1)
    if heads != 1:
        raise RuntimeError("unexpected definition of table jobs; not rebuilt")
    index_sql = [
        row[0]
        for row in bind.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
            " AND sql IS NOT NULL"
        )
    ]
    # table_xinfo's ``hidden``: 0 for a stored column, 2 and 3 for generated ones.
    columns = [row[1] for row in bind.exec_driver_sql("PRAGMA table_xinfo(jobs)") if row[6] == 0]
    listed = ", ".join(f'"{name}"' for name in columns)
    bind.exec_driver_sql(new_sql)
    bind.exec_driver_sql(f"INSERT INTO jobs_rebuilt ({listed}) SELECT {listed} FROM jobs")
    bind.exec_driver_sql("DROP TABLE jobs")
    bind.exec_driver_sql("ALTER TABLE jobs_rebuilt RENAME TO jobs")
    for sql in index_sql:
        bind.exec_driver_sql(sql)
