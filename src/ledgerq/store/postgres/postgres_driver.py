"""The PostgreSQL driver: SKIP LOCKED, RETURNING, LISTEN/NOTIFY, asynchronous commit for
claims and heartbeats, and a psycopg fast path that runs the hot-path statements (claims,
group completions, heartbeats, plain enqueues) without SQLAlchemy's execution machinery."""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from ledgerq.core import errors
from ledgerq.core.ports import FinishSignal, Waker
from ledgerq.store.dialects import (
    Dialect,
    EngineSettings,
    Pooler,
    Sessions,
    insert_or_skip_with,
    pooler_of,
)
from ledgerq.store.engine import IDLE_IN_TRANSACTION_SECONDS, create_engine
from ledgerq.store.postgres import copy_insert, pooled
from ledgerq.store.postgres import statements as pg
from ledgerq.store.postgres.fast import FastStatements, roll_back_open_transactions
from ledgerq.store.postgres.listener import PG_DEAD_PEER_DEFAULTS, PgNotifyWaker
from ledgerq.store.postgres.statements import NOTIFY_CHANNEL
from ledgerq.store.postgres.stats import PostgresStats
from ledgerq.store.stats_reader import StatsReader
from ledgerq.store.tables import jobs

#: Dead rows in ``jobs`` (per pg_stat) above which a worker vacuums the table itself.
MAINTAIN_DEAD_TUPLES = 20_000
_MAINTAIN_LOCK = "ledgerq.maintain"
_PG_DEAD_TUPLES = "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass('jobs')"
# VACUUM needs the table's owner (or the database's, or a superuser; PostgreSQL 17 adds the
# MAINTAIN privilege). Anyone else gets only a WARNING and nothing is done, so ask first.
_PG_MAY_VACUUM = (
    "SELECT pg_has_role(c.relowner, 'USAGE') OR pg_has_role(d.datdba, 'USAGE')"
    " FROM pg_class c, pg_database d"
    " WHERE c.oid = to_regclass('jobs') AND d.datname = current_database()"
)
_PG_MAY_MAINTAIN = "SELECT has_table_privilege('jobs', 'MAINTAIN')"


class PostgresDriver(Dialect):
    """PostgreSQL over psycopg 3 (the only PostgreSQL driver ledgerq speaks)."""

    name = "postgresql"

    def __init__(self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> None:
        super().__init__(engine, relaxed_engine)
        if engine.dialect.driver != "psycopg":
            raise errors.ConfigError(
                f"PostgreSQL needs the psycopg (3) driver, not {engine.dialect.driver!r}:"
                " use a postgresql:// or postgresql+psycopg:// URL"
            )
        #: The transaction-pooling proxy the connections go through (None: direct).
        self.pooler = pooler_of(engine)
        #: The hot path's executor (see ``fast.py``).
        self.fast = FastStatements(engine, relaxed_engine, prepare=self.pooler is None)
        self._direct: sa.Engine | None = None

    @classmethod
    def rewrite_url_text(cls, url: str) -> str:
        """libpq's multi-host spelling (``postgresql://app@db1:5432,db2:5432/ledger``), which
        SQLAlchemy cannot parse, as the one it can (``postgresql://app@/ledger?host=db1:5432&
        host=db2:5432``); psycopg then tries the hosts in order, as libpq does."""
        scheme, sep, rest = url.partition("://")
        authority, _, tail = rest.partition("/")
        userinfo, at, hosts = authority.rpartition("@")
        if not sep or "," not in hosts:
            return url
        path, _, query = tail.partition("?")
        params = "&".join(f"host={host}" for host in hosts.split(",") if host)
        return f"{scheme}://{userinfo}{at}/{path}?{params}{'&' if query else ''}{query}"

    @classmethod
    def normalize_url(cls, url: sa.URL) -> sa.URL:
        return url if "+" in url.drivername else url.set(drivername="postgresql+psycopg")

    @classmethod
    def engine_options(cls, url: sa.URL, asked: EngineSettings) -> tuple[sa.URL, dict[str, Any]]:
        """``asked.relaxed``: commits do not wait for the WAL flush (``synchronous_commit = off``),
        for claims and heartbeats only: losing one in a crash is harmless because the fenced
        completion of a lost attempt is refused.

        ``asked.generic_plans``: each prepared statement is planned once for all parameter values
        (``plan_cache_mode = force_generic_plan``), for statements whose best plan does not
        depend on them (see ``fast.py``). ``asked.application_name`` names the sessions.

        Sessions run in UTC (``timezone = UTC``): psycopg then returns timestamps in
        ``datetime.UTC`` itself, and a claimed job's seven timestamps need no conversion (in
        any other zone, ``Etc/UTC`` included, psycopg and ``Job.from_row`` converted each one:
        about a third of a claim's client CPU). ``timestamptz`` values are instants either way.

        ``asked.pooler``: none of these session settings, no prepared statements (see
        ``pooled.py``).
        """
        if asked.pooler is not None:
            return pooled.engine_options(url, asked, asked.pooler, PG_DEAD_PEER_DEFAULTS)
        existing = url.query.get("options", "")
        existing = existing if isinstance(existing, str) else " ".join(existing)
        wanted = [
            f"-cidle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_SECONDS * 1000}",
            "-ctimezone=UTC",
        ]
        if asked.relaxed:
            wanted.append("-csynchronous_commit=off")
        if asked.generic_plans:
            wanted.append("-cplan_cache_mode=force_generic_plan")
        # An engine derived from another's URL already carries some of them.
        extra = [option for option in wanted if option not in existing.split()]
        url = url.update_query_dict({"options": " ".join([existing, *extra]).strip()})
        if asked.application_name is not None:
            url = url.update_query_dict({"application_name": asked.application_name})
        # A URL's own values win (connect_args would override the URL's query).
        defaults = {k: v for k, v in PG_DEAD_PEER_DEFAULTS.items() if k not in url.query}
        return url, {
            # DB_POOL_SIZE kept, as many again in overflow, as on the other databases
            # (docs/scaling.md counts on it; SQLAlchemy's own default was 5 + 10 whatever
            # was asked).
            "pool_size": asked.pool_size,
            "max_overflow": asked.pool_size,
            "connect_args": {"prepare_threshold": 0, **defaults},
            # Only open transactions are rolled back on return (``configure_engine``).
            "pool_reset_on_return": None,
        }

    @classmethod
    def configure_engine(cls, engine: sa.Engine) -> None:
        if pooler_of(engine) is not None:
            pooled.configure_engine(engine)
        else:
            roll_back_open_transactions(engine)

    @classmethod
    def relaxed_pool(cls, url: str, pooler: Pooler | None = None) -> sa.Engine | None:
        # Behind a pooler a session setting would stay on one server session: none.
        return None if pooler is not None else create_engine(url, pool_size=2, relaxed=True)

    def _listen_engine(self) -> sa.Engine | None:
        """Where LISTEN connects: the store's database, or behind a pooler its direct URL
        (None: there is none, so waiters poll)."""
        if self.pooler is None:
            return self.engine
        if self.pooler.direct_url is None:
            return None
        if self._direct is None:
            # Only its connect arguments are used: the listeners open their own connection.
            self._direct = create_engine(self.pooler.direct_url, pool_size=1)
        return self._direct

    def kept_connections(self) -> int:
        return self.fast.kept_count(self.engine)

    def waker(self, queues: set[str], *, lazy: bool) -> Waker | None:
        listen = self._listen_engine()
        return None if listen is None else PgNotifyWaker(listen, queues, lazy=lazy)

    def finished_signal(self) -> FinishSignal | None:
        from ledgerq.store.postgres.finish_listener import PgFinishedSignal

        listen = self._listen_engine()
        return None if listen is None else PgFinishedSignal(self.engine, listen)

    def now(self) -> sa.ColumnElement[Any]:
        return sa.func.clock_timestamp()

    def now_plus(self, seconds: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        interval = sa.func.make_interval(0, 0, 0, 0, 0, 0, sa.cast(seconds, sa.Float))
        return sa.func.clock_timestamp() + interval

    def epoch_us(self) -> sa.ColumnElement[Any]:
        return sa.cast(sa.func.extract("epoch", sa.func.now()) * 1_000_000, sa.BigInteger)

    def epoch_minute(self, value: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return sa.cast(sa.func.floor(sa.func.extract("epoch", value) / 60), sa.BigInteger)

    def bind_time(self, value: Any) -> Any:
        return value

    def relax_commit(self, conn: Connection) -> None:
        conn.exec_driver_sql("SET LOCAL synchronous_commit = off")

    def build_claim(self, picked: sa.Select[Any], values: dict[str, Any]) -> Any:
        # No history row yet: the statement that ends the attempt writes it.
        return super().build_claim(picked.with_for_update(skip_locked=True), values)

    def claim(
        self, tx: Sessions, built: Any, params: dict[str, Any]
    ) -> Sequence[Mapping[Any, Any]]:
        # Planned once, as the hinted claim: its generic plan reads the partial index of
        # queued rows (the state is a literal, see claims.py), and re-planning cost PostgreSQL
        # 0.13-0.16 ms per claim.
        return self.fast.mappings(built, params, generic_plans=True)

    def claim_ids(
        self, tx: Sessions, built: Any, params: dict[str, Any], queues: Sequence[str]
    ) -> Sequence[Mapping[Any, Any]]:
        # One statement text for any number of ids (see statements.CLAIM_HINTED).
        values = pg.hinted_claim_values(params, queues)
        return self.fast.mappings(pg.CLAIM_HINTED, values, generic_plans=True)

    def _insert_ignore(self) -> Any:
        return postgresql.insert(jobs).on_conflict_do_nothing()

    def insert_or_skip(self, conn: Connection, table: sa.Table, row: dict[str, Any]) -> bool:
        return insert_or_skip_with(postgresql.insert, conn, table, row)

    single_statement_options = {"isolation_level": "AUTOCOMMIT"}  # noqa: RUF012
    insert_notifies = True
    inserts_alone = True

    def insert_plain(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        # Ids come from the sequence in the document's order, so ascending ids are input order.
        ids: Sequence[Any] = conn.execute(pg.INSERT_NOTIFY, pg.insert_values(rows)).scalars().all()
        return sorted(int(i) for i in ids)

    def insert_alone(self, tx: Sessions, rows: Sequence[dict[str, Any]]) -> list[int] | None:
        if len(rows) >= copy_insert.COPY_MIN_ROWS:
            return copy_insert.insert_by_copy(self.fast, rows)
        # Insert and NOTIFY in one autocommit statement, one round trip.
        if len(rows) == 1:
            return [int(self.fast.rows(pg.INSERT_ONE_NOTIFY, rows[0])[0][0])]
        found = self.fast.rows(pg.INSERT_NOTIFY, pg.insert_values(rows))
        return sorted(int(row[0]) for row in found)

    def complete_group(
        self, conn: Connection, params: Sequence[dict[str, Any]]
    ) -> list[bool] | None:
        def run(part: Sequence[dict[str, Any]]) -> Sequence[Any]:
            return conn.execute(pg.COMPLETE_GROUP, pg.complete_group_values(part)).all()

        return _by_unique_ids(_claim_keys(params), lambda at: run([params[i] for i in at]))

    def complete_alone(self, tx: Sessions, params: Sequence[dict[str, Any]]) -> list[bool] | None:
        def run(part: Sequence[dict[str, Any]]) -> Sequence[Any]:
            return self.fast.rows(pg.COMPLETE_GROUP, pg.complete_group_values(part))

        return _by_unique_ids(_claim_keys(params), lambda at: run([params[i] for i in at]))

    def heartbeat_alone(
        self, tx: Sessions, ids: Sequence[int], attempts: Sequence[int], lease_seconds: float
    ) -> list[bool] | None:
        def run(at: Sequence[int]) -> Sequence[Any]:
            values = pg.heartbeat_values(
                [ids[i] for i in at], [attempts[i] for i in at], lease_seconds
            )
            return self.fast.rows(pg.HEARTBEAT_GROUP, values, relaxed=True)

        return _by_unique_ids(list(zip(ids, attempts, strict=True)), run)

    def end_assignments(self, conn: Connection, ends: Sequence[tuple[int, int, str]]) -> None:
        if ends:
            ids, attempts, outcomes = (list(column) for column in zip(*ends, strict=True))
            conn.execute(
                pg.END_ASSIGNMENTS, {"ids": ids, "attempts": attempts, "outcomes": outcomes}
            )

    def upsert_assignments(self, conn: Connection, rows: Sequence[dict[str, Any]]) -> bool:
        document = json.dumps(
            [
                {
                    "job_id": r["a_job"],
                    "attempt": r["a_attempt"],
                    "worker_id": r["a_worker"],
                    "started_at": r["a_started"].isoformat() if r["a_started"] else None,
                    "outcome": r["a_outcome"],
                }
                for r in rows
            ]
        )
        conn.execute(pg.UPSERT_ASSIGNMENTS, {"rows": document})
        return True

    def notify(self, conn: Connection, queues: set[str]) -> None:
        for queue in sorted(queues):
            conn.execute(sa.select(sa.func.pg_notify(NOTIFY_CHANNEL, queue)))

    def maintain(self, engine: sa.Engine) -> bool:
        # A queue table churns; with autovacuum off (or behind) dead index entries pile up in
        # front of the claim and stale statistics mislead the planner. One worker at a time
        # (advisory lock) vacuums and analyzes the table when enough rows died.
        with engine.connect() as plain:
            conn = plain.execution_options(isolation_level="AUTOCOMMIT")
            dead = conn.exec_driver_sql(_PG_DEAD_TUPLES).scalar() or 0
            if dead < MAINTAIN_DEAD_TUPLES:
                return False
            if not self._may_vacuum(conn):
                user = conn.exec_driver_sql("SELECT current_user").scalar()
                raise errors.MaintenanceNotPermitted(
                    f"role {user} does not own table jobs, so it may not vacuum it"
                    " (autovacuum still does)"
                )
            if not self.try_lock(conn, _MAINTAIN_LOCK):
                return False
            try:
                conn.exec_driver_sql("VACUUM (ANALYZE) jobs")
            finally:
                self.unlock(conn, _MAINTAIN_LOCK)
        return True

    @staticmethod
    def _may_vacuum(conn: Connection) -> bool:
        if (conn.dialect.server_version_info or (0,)) >= (17,):
            return bool(conn.exec_driver_sql(_PG_MAY_MAINTAIN).scalar())
        return bool(conn.exec_driver_sql(_PG_MAY_VACUUM).scalar())

    def max_connections(self, conn: Connection) -> int | None:
        return int(conn.exec_driver_sql("SHOW max_connections").scalar_one())

    def stats_reader(self) -> StatsReader:
        return PostgresStats()

    def try_lock(self, conn: Connection, name: str) -> bool:
        if self.pooler is not None:  # a session lock would stay on one server session
            expires = self.now_plus(sa.literal(pooled.LEASE_SECONDS, sa.Float))
            return pooled.take_lease(conn, name, expires)
        key = self._lock_key(conn, name)
        return bool(conn.execute(sa.select(sa.func.pg_try_advisory_lock(key))).scalar())

    def unlock(self, conn: Connection, name: str) -> None:
        if self.pooler is not None:
            pooled.drop_lease(conn, name)
            return
        conn.execute(sa.select(sa.func.pg_advisory_unlock(self._lock_key(conn, name))))

    @staticmethod
    def _lock_key(conn: Connection, name: str) -> int:
        # Advisory locks are database-wide: the ledger's schema goes into the key, so two
        # ledgers in one database (one schema each) never hold each other's lock.
        # The schema is read once per pooled connection (its search_path is fixed), not for
        # both the lock and the unlock.
        if "ledger_schema" not in conn.info:
            conn.info["ledger_schema"] = conn.execute(sa.select(sa.func.current_schema())).scalar()
        return zlib.crc32(f"{conn.info['ledger_schema']}:{name}".encode())


def _claim_keys(params: Sequence[dict[str, Any]]) -> list[tuple[int, int]]:
    """The (id, attempt) of each outcome's claim."""
    return [(int(p["claim_id"]), int(p["claim_attempt"])) for p in params]


def _by_unique_ids(
    keys: Sequence[tuple[int, int]], run: Callable[[Sequence[int]], Sequence[Any]]
) -> list[bool]:
    """Run a statement that writes running jobs over the entries at some positions of
    ``keys`` ((id, attempt) pairs; ``run`` returns the (id, attempt) rows it wrote) and say,
    per entry, whether its write was applied. Each statement takes each job id once
    (``statements.unique_id_parts``): nearly always one statement over every entry; more when
    a group holds two attempts of one job."""
    applied = [False] * len(keys)
    for part in pg.unique_id_parts(keys):
        rows = run(part)
        for i, done in zip(part, pg.applied([keys[i] for i in part], rows), strict=True):
            applied[i] = done
    return applied
