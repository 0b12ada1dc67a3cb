"""The driver interface: what the store asks of a database, with the generic SQL that SQLite,
PostgreSQL and MySQL/MariaDB share. Each database's driver (``store/postgres``,
``store/mariadb``, ``store/sqlite``) overrides what its database does differently or faster;
nothing outside a driver asks which database it is (``drivers.driver_for`` picks one).

Timestamps that decide leases come from the database clock (``now``/``now_plus``). The claim
is one atomic round trip per database (see each driver).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.engine import Connection, RowMapping

from ledgerq.core import errors
from ledgerq.core.ports import FinishSignal, Waker
from ledgerq.store.stats_reader import StatsReader
from ledgerq.store.tables import job_assignments, jobs


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """What ``engine.create_engine`` was asked for (all but the pool size are PostgreSQL's:
    see ``PostgresDriver.engine_options``)."""

    pool_size: int = 10
    relaxed: bool = False
    generic_plans: bool = False
    application_name: str | None = None
    pooler: Pooler | None = None


@dataclass(frozen=True, slots=True)
class Pooler:
    """The ledger's connections go through a transaction-pooling proxy (PgBouncer): each
    transaction may run on another server session, so nothing may rely on session state
    (prepared statements, session settings and advisory locks, LISTEN). ``direct_url``: a URL
    of the same database that bypasses the proxy, for LISTEN (None: idle workers poll)."""

    kind: str = "pgbouncer"
    direct_url: str | None = None


#: Engine execution option carrying an engine's ``Pooler`` (absent: direct connections).
POOLER_OPTION = "ledgerq_pooler"


def pooler_of(engine: sa.Engine) -> Pooler | None:
    """The ``Pooler`` that ``engine`` was created with (None: it connects directly)."""
    found = engine.get_execution_options().get(POOLER_OPTION)
    return found if isinstance(found, Pooler) else None


class Sessions(Protocol):
    """The store's transactions, as a driver's hot-path calls use them."""

    def _begin(self) -> AbstractContextManager[Connection]: ...

    def _single(self, *, relaxed: bool = False) -> AbstractContextManager[Connection]: ...


class Dialect:
    """A database driver: generic SQL here; subclasses override what their database does
    differently or faster. Built with the store's engines (``relaxed_engine``: commits that
    need not wait for the disk; only PostgreSQL's fast path uses it)."""

    name = "generic"

    def __init__(self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> None:
        self.engine = engine
        self._ending: tuple[sa.Update, sa.Insert] | None = None

    # -- engines -------------------------------------------------------------------------

    @classmethod
    def rewrite_url_text(cls, url: str) -> str:
        """``url`` in a spelling SQLAlchemy parses (a database's own URL forms rewritten)."""
        return url

    @classmethod
    def normalize_url(cls, url: sa.URL) -> sa.URL:
        """``url`` with this driver's DBAPI when it names none, and the settings it needs."""
        return url

    @classmethod
    def engine_options(cls, url: sa.URL, asked: EngineSettings) -> tuple[sa.URL, dict[str, Any]]:
        """The URL and ``sa.create_engine`` options of an engine (see ``create_engine``);
        ``ConfigError`` if this database cannot run behind the asked pooler."""
        if asked.pooler is not None:
            raise errors.ConfigError(
                f"LEDGERQ_DB_POOLER={asked.pooler.kind} needs a PostgreSQL database URL"
            )
        return url, {"pool_size": asked.pool_size, "max_overflow": asked.pool_size}

    @classmethod
    def configure_engine(cls, engine: sa.Engine) -> None:
        """Set up a new engine (event listeners)."""

    @classmethod
    def relaxed_pool(cls, url: str, pooler: Pooler | None = None) -> sa.Engine | None:
        """A small engine for claims and heartbeats whose commits do not wait for the disk,
        if this database has such a setting (None: the store's engine serves them)."""
        return None

    def kept_connections(self) -> int:
        """Connections of the store's engine that are checked out but idle, kept between
        hot-path statements (the pool counts them as in use)."""
        return 0

    def waker(self, queues: set[str], *, lazy: bool) -> Waker | None:
        """What wakes idle workers of ``queues`` when jobs arrive (None: polling alone)."""
        return None

    def finished_signal(self) -> FinishSignal | None:
        """What wakes ``app.jobs.wait`` when its job finished (None: it polls alone)."""
        return None

    # -- clock ---------------------------------------------------------------------------

    def now(self) -> sa.ColumnElement[Any]:
        """The database's current UTC time."""
        raise NotImplementedError

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """The database's current UTC time plus ``seconds`` (a float expression)."""
        raise NotImplementedError

    def epoch_us(self) -> sa.ColumnElement[Any]:
        """The database clock in integer microseconds since the epoch, fixed for one
        statement (rate limits)."""
        raise NotImplementedError

    def epoch_minute(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """Whole minutes since the epoch of the UTC timestamp ``value`` (a column or
        ``now()``), an integer: the buckets of the dashboard's per-minute history."""
        raise NotImplementedError

    def bind_time(self, value: Any) -> Any:
        """Adapt an aware UTC datetime for binding (naive UTC where the column has no zone)."""
        return value.replace(tzinfo=None)

    # -- row locks -----------------------------------------------------------------------

    def locking(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        """``stmt`` locking the rows it reads until the transaction ends."""
        return stmt.with_for_update()

    def skipping_locked(self, stmt: sa.Select[Any]) -> sa.Select[Any]:
        """``stmt`` locking the rows it reads, passing over rows others have locked."""
        return stmt.with_for_update(skip_locked=True)

    #: Whether a claim re-checks its candidates on the locked row versions (databases that
    #: lock rows after reading candidates; not one that holds a write lock for the claim).
    rechecks_candidates = True

    def relax_commit(self, conn: Connection) -> None:
        """Let this transaction's commit not wait for the disk, where the database allows."""

    # -- claims --------------------------------------------------------------------------

    def build_claim(self, picked: sa.Select[Any], values: dict[str, Any]) -> Any:
        """Prepare, once per queue set, what ``claim`` executes: move the rows ``picked``
        selects to running with ``values``. Built statements are reused, so SQLAlchemy's
        compiled cache is hit without rebuilding the statement tree on every claim."""
        ids = picked.scalar_subquery()
        return sa.update(jobs).where(jobs.c.id.in_(ids)).values(values).returning(*jobs.c)

    def claim(
        self, tx: Sessions, built: Any, params: dict[str, Any]
    ) -> Sequence[Mapping[Any, Any]]:
        """Execute a claim prepared by ``build_claim``; return the claimed rows."""
        with tx._single(relaxed=True) as conn:
            return self.run_claim(conn, built, params)

    def run_claim(
        self, conn: Connection, built: Any, params: dict[str, Any]
    ) -> Sequence[RowMapping]:
        """Execute a claim prepared by ``build_claim`` on ``conn``."""
        return conn.execute(built, params).mappings().all()

    def claim_ids(
        self, tx: Sessions, built: Any, params: dict[str, Any], queues: Sequence[str]
    ) -> Sequence[Mapping[Any, Any]]:
        """Claim among ``params["hint_ids"]`` (of ``queues``) with the claim ``built`` from
        the hinted selection; a driver may run a statement of its own instead."""
        return self.claim(tx, built, params)

    # -- inserts -------------------------------------------------------------------------

    def insert_unless_duplicate(self, conn: Connection, row: dict[str, Any]) -> int | None:
        """Insert one job row; return its id, or None if its dedupe key is taken."""
        stmt = self._insert_ignore().values(row).returning(jobs.c.id)
        found = conn.execute(stmt).scalar()
        return int(found) if found is not None else None

    def _insert_ignore(self) -> Any:
        raise NotImplementedError

    def insert_or_skip(self, conn: Connection, table: sa.Table, row: dict[str, Any]) -> bool:
        """Insert ``row`` into ``table`` unless its primary key exists (waiting for a
        concurrent inserter of the same key to finish); True if inserted."""
        raise NotImplementedError

    #: Execution options for a call that is a single statement (atomic on its own).
    single_statement_options: dict[str, Any] = {}  # noqa: RUF012 - read-only

    #: Whether ``insert_plain`` also wakes the workers of the inserted queues.
    insert_notifies = False

    #: Whether ``insert_alone`` may insert plain jobs outside a caller's transaction.
    inserts_alone = False

    def insert_plain(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        """Insert rows (with ``delay_s``) in one statement and return ids in input order, or
        None to let the caller use SQLAlchemy's portable bulk insert."""
        return None

    def insert_alone(self, tx: Sessions, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        """Insert rows (with ``delay_s``) in a transaction of their own, waking their workers
        where ``insert_notifies`` (one statement, or PostgreSQL's COPY for a large batch); ids
        in input order, or None for the portable path (always where ``inserts_alone`` is
        false)."""
        return None

    # -- writes of running jobs ----------------------------------------------------------

    def update_many(
        self,
        conn: Connection,
        stmt: sa.Update,
        params: Sequence[dict[str, Any]],
    ) -> list[bool]:
        """Run a fenced UPDATE once per parameter set, in the caller's transaction."""
        return [conn.execute(stmt, p).rowcount == 1 for p in params]

    def complete_group(
        self, conn: Connection, params: Sequence[dict[str, Any]]
    ) -> list[bool] | None:
        """Write a group of fenced outcomes and their history in one statement, or None for
        the portable loop. Each param has claim_id, claim_attempt, new_state, new_result,
        new_error, retry_delay, ran_s."""
        return None

    def complete_alone(self, tx: Sessions, params: Sequence[dict[str, Any]]) -> list[bool] | None:
        """Like ``complete_group``, in a transaction of its own (None: not on this driver)."""
        return None

    def heartbeat_alone(
        self, tx: Sessions, ids: Sequence[int], attempts: Sequence[int], lease_seconds: float
    ) -> list[bool] | None:
        """Renew leases in one statement of its own transaction, or None for the portable
        loop."""
        return None

    def end_assignments(self, conn: Connection, ends: Sequence[tuple[int, int, str]]) -> None:
        """Write the history rows of ``(job_id, attempt, outcome)`` whose outcomes were just
        written in ``conn``'s transaction (worker and start read from the jobs)."""
        if not ends:
            return
        if self._ending is None:
            self._ending = ending(self)
        # Open rows are closed, missing ones inserted with holder and start read from the jobs
        # (the outcome keeps them): two statements per group, whatever its size.
        rows = [{"a_job": j, "a_attempt": a, "a_outcome": o} for j, a, o in ends]
        for statement in self._ending:
            conn.execute(statement, rows)

    def upsert_assignments(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        """Write assignment rows (a_job, a_attempt, a_worker, a_started, a_outcome) in one
        statement: insert new attempts, close open ones (the first end wins). False: the
        driver has no such statement and the caller runs the portable steps."""
        return False

    # -- wake-ups, upkeep, locks -----------------------------------------------------------

    def notify(self, conn: Connection, queues: set[str]) -> None:
        """Wake idle workers of these queues when the transaction commits (if supported)."""

    def maintain(self, engine: sa.Engine) -> bool:
        """Clean up after churn if the server will not; True if something was done."""
        return False

    def max_connections(self, conn: Connection) -> int | None:
        """The server's connection limit (None: it has none)."""
        return None

    def stats_reader(self) -> StatsReader:
        """What this database can tell ``ledgerq db stats`` (see ``stats_reader.py``)."""
        return StatsReader()

    def try_lock(self, conn: Connection, name: str) -> bool:
        """Take the named session lock on ``conn`` without waiting; True if taken. SQLite
        needs none: one host, and every repair is fenced and safe to repeat."""
        return True

    def unlock(self, conn: Connection, name: str) -> None:
        """Release a lock taken by ``try_lock`` on the same connection."""


def closing(dialect: Dialect) -> sa.Update:
    """Closes the open row of (``a_job``, ``a_attempt``) with ``a_outcome``; a closed row keeps
    its first end."""
    a = job_assignments
    return (
        sa.update(a)
        .where(
            a.c.job_id == sa.bindparam("a_job"),
            a.c.attempt == sa.bindparam("a_attempt"),
            a.c.ended_at.is_(None),
        )
        .values(outcome=sa.bindparam("a_outcome"), ended_at=dialect.now())
    )


def ending(dialect: Dialect) -> tuple[sa.Update, sa.Insert]:
    """``Dialect.end_assignments``'s statements (built once per driver)."""
    attempt = sa.bindparam("a_attempt", type_=sa.Integer)
    outcome = sa.bindparam("a_outcome", type_=sa.String)
    a = job_assignments
    recorded = sa.exists().where(a.c.job_id == jobs.c.id, a.c.attempt == attempt)
    ended = sa.select(
        jobs.c.id,
        attempt,
        sa.func.coalesce(jobs.c.worker_id, "(no worker)"),
        sa.func.coalesce(jobs.c.claimed_at, jobs.c.started_at, dialect.now()),
        dialect.now(),
        outcome,
    ).where(jobs.c.id == sa.bindparam("a_job"), ~recorded)
    columns = ["job_id", "attempt", "worker_id", "started_at", "ended_at", "outcome"]
    return closing(dialect), sa.insert(a).from_select(columns, ended)


def insert_or_skip_with(
    insert: Any, conn: Connection, table: sa.Table, row: dict[str, Any]
) -> bool:
    """``insert_or_skip`` for databases with ``ON CONFLICT DO NOTHING`` (``insert``: the
    dialect's own insert construct)."""
    key = table.primary_key.columns[0]  # RETURNING: rowcount is -1 here under psycopg
    stmt = insert(table).values(row).on_conflict_do_nothing().returning(key)
    return conn.execute(stmt).first() is not None
