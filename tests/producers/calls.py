"""Calls of the SQL enqueue contract (docs/producers.md) as any producer makes them: plain SQL
on a connection of the application's own transaction, PostgreSQL's function or MariaDB's
procedure. The tests use these to speak the contract without ledgerq's Python producer."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

#: PostgreSQL casts of the function's parameters that are not text or numbers.
_PG_CASTS = {"kwargs": "json", "run_at": "timestamptz", "expires_at": "timestamptz"}


def sql_enqueue(
    conn: Connection, task: str, args: Any = (), queue: str = "default", **options: Any
) -> int:
    """Enqueue ``task`` through the database's routine on ``conn`` (in its transaction) and
    return the job id. ``args`` is JSON-encoded unless it is text already; ``options`` are the
    contract's options by name (run_at/expires_at as ISO 8601 text)."""
    args_json = args if isinstance(args, str) else json.dumps(list(args))
    if conn.dialect.name == "postgresql":
        named = "".join(
            f", {name} => CAST(:{name} AS {_PG_CASTS.get(name, 'text')})"
            if name in _PG_CASTS or name == "dedupe_key"
            else f", {name} => :{name}"
            for name in options
        )
        params = {
            name: json.dumps(value) if name == "kwargs" else value
            for name, value in options.items()
        }
        stmt = sa.text(f"SELECT ledgerq_enqueue(:task, CAST(:args AS json), :queue{named})")
        return int(
            conn.execute(
                stmt, {"task": task, "args": args_json, "queue": queue, **params}
            ).scalar_one()
        )
    conn.execute(
        sa.text("CALL ledgerq_enqueue(:task, :args, :queue, :options, @ledgerq_job_id)"),
        {
            "task": task,
            "args": args_json,
            "queue": queue,
            "options": json.dumps(options) if options else None,
        },
    )
    return int(conn.execute(sa.text("SELECT @ledgerq_job_id")).scalar_one())


def contract_version(conn: Connection) -> int:
    """The contract version the database has installed (``ledgerq_enqueue_version``)."""
    if conn.dialect.name == "postgresql":
        return int(conn.execute(sa.text("SELECT ledgerq_enqueue_version()")).scalar_one())
    conn.execute(sa.text("CALL ledgerq_enqueue_version(@ledgerq_version)"))
    return int(conn.execute(sa.text("SELECT @ledgerq_version")).scalar_one())
