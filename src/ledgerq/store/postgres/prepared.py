"""Runs a fast statement with libpq's prepared-statement calls (psycopg's ``pq`` layer), with
psycopg's own adapters for the parameters and the rows, but without a cursor.

A psycopg cursor per statement (its creation, the generator-driven execute, the prepared-
statement bookkeeping, the result checks) cost about 75 us of client CPU per statement on a
2-core VM, against 134-145 us for the whole prepared insert run this way (210-260 through a
cursor; docs/benchmarks.md, 2026-12-07). Every enqueue, claim, completion and heartbeat is
one such statement.

What the cursor did and this keeps:
- The values are adapted by a ``Transformer`` of the connection, as a cursor's are: the same
  dumpers (formats and types chosen per value, ``PyFormat.AUTO``) and the same loaders, so
  rows hold the same Python values.
- A statement is prepared once per connection and per parameter types (psycopg's prepared
  statements are keyed the same way); the names are this module's (``lq_*``) and never meet
  psycopg's own (``_pg3_*``).
- A failed statement raises psycopg's error for its SQLSTATE; a lost connection raises
  ``OperationalError``, which makes the caller invalidate the connection.
- A prepared statement the server no longer knows (a session reset) is prepared again once.

The blocking libpq calls release the GIL while they wait, as psycopg's wait does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import ConnStatus, DiagnosticField, ExecStatus
from sqlalchemy.pool import PoolProxiedConnection

#: The key of a connection's prepared statements in the pool's per-connection ``info`` (which
#: the pool clears when it opens a new session for the record).
_INFO_KEY = "ledgerq_prepared"
_PLACEHOLDER = re.compile(r"%%|%\(([^)]+)\)s")
_DONE = (ExecStatus.COMMAND_OK, ExecStatus.TUPLES_OK)


class PreparedSql:
    """A statement compiled for psycopg (``%(name)s`` placeholders) in libpq's form
    (``$1``..), with the order its named parameters take."""

    __slots__ = ("formats", "names", "sql")

    def __init__(self, pyformat_sql: str) -> None:
        names: list[str] = []

        def placeholder(match: re.Match[str]) -> str:
            name = match.group(1)
            if name is None:
                return "%"  # an escaped percent sign
            if name not in names:
                names.append(name)
            return f"${names.index(name) + 1}"

        self.sql = _PLACEHOLDER.sub(placeholder, pyformat_sql).encode()
        self.names = tuple(names)
        self.formats = [PyFormat.AUTO] * len(names)


class _Session:
    """What one connection holds: its transformer, its prepared statements by (statement,
    parameter types), and the column names of each one's rows."""

    __slots__ = ("columns", "names", "prepared", "transformer")

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self.transformer: Any = Transformer.from_context(connection)
        self.names: dict[tuple[bytes, tuple[int, ...]], bytes] = {}
        self.columns: dict[bytes, list[str]] = {}
        self.prepared = 0  # statements prepared on this connection so far (names them)


def run(
    pooled: PoolProxiedConnection,
    statement: PreparedSql,
    params: Mapping[str, Any],
    *,
    as_dicts: bool,
) -> list[Any]:
    """Execute ``statement`` on ``pooled`` (a psycopg connection in autocommit, used by this
    thread only) and return its rows, as dicts or tuples ([] if it returns none)."""
    connection: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
    session = pooled.info.get(_INFO_KEY)
    if session is None:
        session = pooled.info[_INFO_KEY] = _Session(connection)
    transformer = session.transformer
    values: Any = transformer.dump_sequence([params[n] for n in statement.names], statement.formats)
    # Keyed by the text, not the object: a session may outlive the statements' owner, and a
    # new object at the same address must not run another statement's prepared name.
    key = (statement.sql, tuple(transformer.types))
    name = session.names.get(key)
    pgconn: Any = connection.pgconn
    if name is None:
        name = _prepare(session, key, statement, pgconn)
    result = pgconn.exec_prepared(name, values, transformer.formats)
    if result.status not in _DONE:
        if result.error_field(DiagnosticField.SQLSTATE) == b"26000":
            # Not prepared on the server any more (the session was reset): once more.
            del session.names[key]
            name = _prepare(session, key, statement, pgconn)
            result = pgconn.exec_prepared(name, values, transformer.formats)
        _check(result, pgconn, transformer)
    if result.status != ExecStatus.TUPLES_OK:
        return []
    transformer.set_pgresult(result)
    make_row: Callable[[Sequence[Any]], Any] = tuple
    if as_dicts:
        columns = session.columns.get(name)
        if columns is None:
            columns = session.columns[name] = [
                (result.fname(i) or b"").decode() for i in range(result.nfields)
            ]
        make_row = lambda values: dict(zip(columns, values, strict=True))  # noqa: E731
    rows: list[Any] = transformer.load_rows(0, result.ntuples, make_row)
    return rows


def _prepare(
    session: _Session, key: tuple[bytes, tuple[int, ...]], statement: PreparedSql, pgconn: Any
) -> bytes:
    session.prepared += 1
    name = b"lq_%d" % session.prepared
    result = pgconn.prepare(name, statement.sql, list(key[1]))
    _check(result, pgconn, session.transformer)
    session.names[key] = name
    return name


def _check(result: Any, pgconn: Any, transformer: Any) -> None:
    """Raise psycopg's error for a failed ``result`` (``OperationalError`` if the session
    is gone)."""
    if result.status in _DONE:
        return
    if pgconn.status == ConnStatus.BAD:
        message = (pgconn.error_message or b"").decode(errors="replace").strip()
        raise psycopg.OperationalError(message or "the connection to the database was lost")
    raise pg_errors.error_from_result(result, encoding=transformer.encoding)
