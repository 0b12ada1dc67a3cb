"""PostgreSQL's hot-path statements (enqueues, claims, group completions, heartbeats) run on
psycopg directly: compiled once by SQLAlchemy, prepared once per connection and executed in
autocommit on a pooled connection through libpq's prepared-statement calls, without a cursor
(``prepared.py``). SQLAlchemy's execution machinery (connection wrapper,
events, result metadata) cost a worker about three times the client CPU of the statement
itself (a claim of 8: ~590 us against ~170 us), and the fetcher and completer hold the GIL
for it while the job threads wait.

Claims run on a pool of their own whose sessions plan each prepared statement once for
every parameter value (``plan_cache_mode = force_generic_plan``). Left to itself, PostgreSQL
re-plans a claim of one or a few ids on every call (a custom plan looks cheaper for a short id
array than the generic plan, which assumes a longer one), and the planning doubled the claim:
0.33 ms for one id at p50 against 0.18 ms planned once (see docs/architecture.md, "Claims are
planned once"). The plan is the same for any ids (primary key lookups). A claim by query,
re-planned, cost 0.13-0.16 ms of planning per call; its generic plan reads the partial index
of queued jobs because the state it asks for is a literal of the statement.

Behind a transaction-pooling proxy (``prepare=False``, see ``pooled.py``) nothing is
prepared and the generic-plan pool is not used: statements go through a psycopg cursor,
unprepared, and are planned per call."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import dict_row
from sqlalchemy.pool import PoolProxiedConnection

from ledgerq.core import errors
from ledgerq.store import transactions
from ledgerq.store.engine import create_engine
from ledgerq.store.postgres import prepared
from ledgerq.store.postgres.kept import KeptConnection
from ledgerq.store.postgres.prepared import PreparedSql

#: ``application_name`` of the sessions that plan their statements generically (visible in
#: ``pg_stat_activity``).
GENERIC_PLANS_NAME = "ledgerq-claims"


class FastStatements:
    """Runs compiled statements on the pools of ``engine`` (durable) and ``relaxed_engine``
    (claims and heartbeats: commits that need not wait for the disk); ``prepare``: whether
    statements are prepared on the server (not through a transaction-pooling proxy)."""

    def __init__(
        self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None, *, prepare: bool = True
    ) -> None:
        self._engine = engine
        self._prepare = prepare
        self._relaxed = relaxed_engine or engine
        self._compiled: dict[int, tuple[Any, str, dict[str, Any], PreparedSql]] = {}
        self._generic: sa.Engine | None = None
        self._generic_lock = threading.Lock()
        # The generic-plan pool is this object's own, but callers dispose the store's engine:
        # close it with that engine, so its connections never outlive the store's.
        sa.event.listen(engine, "engine_disposed", lambda _engine: self.dispose())
        self._kept: dict[sa.Engine, KeptConnection] = {}
        for pool_owner in {engine, self._relaxed}:
            _leave_autocommit_to_fast_path(pool_owner)
            self._kept[pool_owner] = KeptConnection(pool_owner)

    def mappings(
        self,
        statement: sa.Executable,
        params: Mapping[str, Any],
        *,
        relaxed: bool = False,
        generic_plans: bool = False,
    ) -> list[dict[str, Any]]:
        """Execute ``statement`` with ``params``; return its rows as dicts. ``generic_plans``:
        on the relaxed pool whose sessions plan each statement once (see the module)."""
        generic = generic_plans and self._prepare
        engine = self._generic_engine() if generic else self._pick(relaxed or generic_plans)
        return self._run(engine, statement, params, as_dicts=True)

    def rows(
        self, statement: sa.Executable, params: Mapping[str, Any], *, relaxed: bool = False
    ) -> list[tuple[Any, ...]]:
        """Execute ``statement`` with ``params``; return its rows as tuples."""
        return self._run(self._pick(relaxed), statement, params, as_dicts=False)

    def _run(
        self,
        engine: sa.Engine,
        statement: sa.Executable,
        params: Mapping[str, Any],
        *,
        as_dicts: bool,
    ) -> list[Any]:
        sql, fixed, prepared_sql = self._compile(statement)
        with self._connection(engine) as pooled:
            if self._prepare:
                return prepared.run(pooled, prepared_sql, {**fixed, **params}, as_dicts=as_dicts)
            # Behind a transaction-pooling proxy: nothing is prepared (see pooled.py).
            connection: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
            factory: Any = dict_row if as_dicts else None
            with connection.cursor(row_factory=factory) as cursor:
                cursor.execute(sql, {**fixed, **params}, prepare=False)
                return cursor.fetchall() if _returned_rows(cursor) else []

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A tuple cursor on the durable pool inside one transaction, committed when the
        block ends (rolled back if it raises); for statements that cannot share one
        autocommit statement, such as ``COPY`` and what must commit with it."""
        with self._connection(self._engine, autocommit=False) as pooled:
            connection: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
            with connection.cursor() as cursor:
                yield cursor
            connection.commit()

    @property
    def prepares(self) -> bool:
        """Whether statements are prepared on the server (not behind a pooling proxy)."""
        return self._prepare

    def kept_count(self, engine: sa.Engine) -> int:
        """``engine``'s connections kept between statements (0 or 1; see ``kept.py``)."""
        keeper = self._kept.get(engine)
        return 0 if keeper is None else keeper.count

    def dispose(self) -> None:
        """Close the generic-plan pool's connections (the others belong to the store)."""
        if self._generic is not None:
            self._generic.dispose()

    def _pick(self, relaxed: bool) -> sa.Engine:
        return self._relaxed if relaxed else self._engine

    def _generic_engine(self) -> sa.Engine:
        # Built on first use: a process that never claims never opens it.
        if self._generic is None:
            with self._generic_lock:
                if self._generic is None:
                    url = self._relaxed.url.render_as_string(hide_password=False)
                    self._generic = create_engine(
                        url,
                        pool_size=1,
                        relaxed=True,
                        generic_plans=True,
                        application_name=GENERIC_PLANS_NAME,
                    )
                    _leave_autocommit_to_fast_path(self._generic)
                    self._kept[self._generic] = KeptConnection(self._generic)
        return self._generic

    def _compile(self, statement: sa.Executable) -> tuple[str, dict[str, Any], PreparedSql]:
        # Keyed by identity: the store keeps its statements for its lifetime; the statement is
        # held here too, so its id cannot be reused by another object.
        found = self._compiled.get(id(statement))
        if found is None:
            compiled = statement.compile(dialect=self._engine.dialect)  # type: ignore[attr-defined]
            sql = str(compiled)
            if "POSTCOMPILE" in sql:
                raise ValueError("expanding parameters are not supported on the fast path")
            found = (statement, sql, dict(compiled.params), PreparedSql(sql))
            self._compiled[id(statement)] = found
        return found[1], found[2], found[3]

    @contextmanager
    def _connection(
        self, engine: sa.Engine, *, autocommit: bool = True
    ) -> Iterator[PoolProxiedConnection]:
        # Autocommit statements reuse the connection kept between them (see kept.py); a
        # transaction takes one from the pool.
        keeper = self._kept[engine] if autocommit else None
        generation = keeper.generation if keeper is not None else 0
        pooled = keeper.take() if keeper is not None else None
        if pooled is None:
            pooled = _check_out(engine, autocommit)
        idle = False
        try:
            connection: psycopg.Connection[Any] = pooled.driver_connection  # type: ignore[assignment]
            if connection.autocommit != autocommit:
                connection.autocommit = autocommit
            yield pooled
            idle = True
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) or pooled.driver_connection.closed:  # type: ignore[union-attr]
                pooled.invalidate(exc)
            raise _translate(exc) from exc
        finally:
            if idle and keeper is not None:
                keeper.keep(pooled, generation)
            else:
                pooled.close()


def _check_out(engine: sa.Engine, autocommit: bool) -> PoolProxiedConnection:
    """One of ``engine``'s pooled connections; ``StoreUnavailable`` if it cannot connect."""
    try:
        _CHECKOUT.fast = autocommit
        try:
            return engine.raw_connection()
        finally:
            _CHECKOUT.fast = False
    except sa.exc.DBAPIError as exc:
        raise _translate(exc.orig or exc) from exc
    except psycopg.Error as exc:  # the pool's own connect is not wrapped by SQLAlchemy
        raise _translate(exc) from exc


class _Checkout(threading.local):
    fast = False  # whether this thread's checkout is the fast path's autocommit one


_CHECKOUT = _Checkout()


def _leave_autocommit_to_fast_path(engine: sa.Engine) -> None:
    """A fast statement leaves its connection in autocommit; any other checkout (SQLAlchemy's
    transactions) gets it back in transaction mode. Switching both ways around every fast
    statement cost each claim, completion and enqueue two of psycopg's lock-and-wait calls
    (about 40 us of client CPU on a loaded 2-core machine, against about 400 for the whole
    statement); a pool serving only fast statements now never switches."""

    @sa.event.listens_for(engine, "checkout")
    def _restore_transactions(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if not _CHECKOUT.fast and dbapi_connection.autocommit:
            dbapi_connection.autocommit = False


def roll_back_open_transactions(engine: sa.Engine) -> None:
    """What SQLAlchemy's rollback-on-return does, for an engine created without it
    (``pool_reset_on_return=None``): a connection handed back inside a transaction (or in an
    unknown state) is rolled back. One handed back idle, as every fast statement's is, is
    left alone: psycopg's rollback of an idle connection sends nothing but still took a lock
    and a wait on every return."""

    @sa.event.listens_for(engine, "reset")
    def _roll_back(dbapi_connection: Any, _record: Any, state: Any) -> None:
        if state.terminate_only or state.transaction_was_reset:
            return
        if dbapi_connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            dbapi_connection.rollback()


def _returned_rows(cursor: Any) -> bool:
    """Whether the last statement returned rows. Read from the result's status: the cursor's
    ``description`` builds a Column object per result column on every call (26 for a claim's
    ``jobs.*``), which cost as much client CPU as the rest of a one-job claim's bookkeeping."""
    result = cursor.pgresult
    return result is not None and result.status == psycopg.pq.ExecStatus.TUPLES_OK


def _translate(exc: BaseException) -> errors.StoreError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return transactions.unavailable(detail)
    if "does not exist" in detail:
        return errors.StoreError(
            f"the ledger's tables are missing ({detail}): run `ledgerq db migrate`"
        )
    return errors.StoreError(f"database error: {detail}")
