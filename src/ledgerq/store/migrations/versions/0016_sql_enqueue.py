"""The SQL enqueue contract, version 1 (docs/producers.md): on PostgreSQL the function
``ledgerq_enqueue(task, args, queue, ...)`` returning the job id, on MariaDB/MySQL the procedure
``ledgerq_enqueue(task, args, queue, options, OUT job_id)``, and the contract's version from
``ledgerq_enqueue_version()`` (a procedure with an OUT parameter on MariaDB). SQLite has no
stored routines: producers there use Python. The routines' text lives in
``migrations/sql/enqueue_v1.*.sql``; a later version of the contract gets files of its own.

Revision ID: 0016_sql_enqueue
Revises: 0014_lifetime_totals
"""

from __future__ import annotations

from pathlib import Path

from alembic import op

revision = "0016_sql_enqueue"
down_revision = "0014_lifetime_totals"
branch_labels = None
depends_on = None

_SQL = Path(__file__).resolve().parent.parent / "sql"
_SEPARATOR = "\n-- ;;\n"
_FILES = {"postgresql": "enqueue_v1.postgresql.sql", "mysql": "enqueue_v1.mariadb.sql"}
_DROPS = {
    "postgresql": (
        "DROP FUNCTION IF EXISTS ledgerq_enqueue(text, json, text, json, integer,"
        " double precision, timestamptz, integer, double precision, text, double precision,"
        " timestamptz, boolean)",
        "DROP FUNCTION IF EXISTS ledgerq_enqueue_version()",
    ),
    "mysql": (
        "DROP PROCEDURE IF EXISTS ledgerq_enqueue",
        "DROP PROCEDURE IF EXISTS ledgerq_enqueue_version",
    ),
}


def _dialect() -> str | None:
    name = op.get_bind().dialect.name
    return "mysql" if name in ("mysql", "mariadb") else name if name == "postgresql" else None


def upgrade() -> None:
    dialect = _dialect()
    if dialect is None:
        return  # SQLite: no stored routines
    text = (_SQL / _FILES[dialect]).read_text(encoding="utf-8")
    _run(text.split(_SEPARATOR))


def downgrade() -> None:
    dialect = _dialect()
    if dialect is None:
        return
    _run(_DROPS[dialect])


def _run(statements: tuple[str, ...] | list[str]) -> None:
    # On the DB-API cursor without parameters, in the migration's transaction: the routines'
    # bodies hold '%' and ':' that a placeholder parser (psycopg's, SQLAlchemy's) would misread.
    cursor = op.get_bind().connection.cursor()
    try:
        for statement in statements:
            cursor.execute(statement)
    finally:
        cursor.close()
