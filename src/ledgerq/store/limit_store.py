"""SqlLimitStore: fleet-wide limits kept in the ledger (the LimitStore and RateLimitBackend ports).

Every decision runs in one transaction that first locks the limit's row (``SELECT .. FOR
UPDATE``; SQLite's ``BEGIN IMMEDIATE`` serializes writers anyway), and every time comes from
the database clock, so workers on hosts with skewed clocks still share one window.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import limits
from ledgerq.core.job import Claim, as_utc
from ledgerq.store import moves
from ledgerq.store.history import put_back
from ledgerq.store.tables import circuit_breakers, concurrency_slots, jobs, limit_keys
from ledgerq.store.transactions import SqlTransactions


class SqlLimitStore(SqlTransactions):
    """Rate windows, concurrency slots, circuit breakers and postponing, over SQLAlchemy Core."""

    def __init__(self, engine: sa.Engine, relaxed_engine: sa.Engine | None = None) -> None:
        """``relaxed_engine`` (optional, the job store's) serves rate decisions, whose commits
        need not wait for the disk (see ``acquire_rate``)."""
        super().__init__(engine, relaxed_engine)
        self._known: set[str] = set()

    # -- shared helpers ------------------------------------------------------------------------

    @contextmanager
    def _decide(self) -> Iterator[Connection]:
        """A transaction for one limit decision. On PostgreSQL its commit does not wait for
        the WAL flush: decisions are serialized by the row lock, so a flush per decision
        would cap a limit's throughput at the disk's, and a decision lost in a crash only
        lets one more job through (its concurrency slot frees itself, see ``acquire_slot``).
        """
        with self._begin() as conn:
            self.dialect.relax_commit(conn)
            yield conn

    def _now(self, conn: Connection) -> datetime:
        """The database clock as an aware UTC datetime."""
        return _as_time(conn.execute(sa.select(self.dialect.now())).scalar_one())

    def _lock_row(self, conn: Connection, name: str) -> Any:
        """Lock the ``limit_keys`` row of ``name`` (``_ensure_row`` made it exist)."""
        stmt = sa.select(limit_keys.c.name).where(limit_keys.c.name == name)
        return conn.execute(self.dialect.locking(stmt)).one()

    def _ensure_row(self, name: str) -> None:
        """Create the row of ``name`` once per process, before any locking transaction: a
        locking read of a missing row takes a gap lock on MariaDB that blocks the insert."""
        if name in self._known:
            return
        # Its own transaction: a concurrent creator's duplicate key must not abort the caller's.
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    sa.insert(limit_keys).values(name=name, tat_us=0, updated_at=self.dialect.now())
                )
        except sa.exc.IntegrityError:
            pass  # someone else created it first: fine
        self._known.add(name)

    # -- rate limits (GCRA) -----------------------------------------------------------------

    def acquire_rate(self, *, name: str, rate: limits.Rate) -> limits.RateDecision:
        """Admit one use of ``name`` under ``rate`` (GCRA, see ``core.limits.Rate``) with one
        conditional UPDATE: the row is locked only for that statement, never across a round
        trip, so a busy limit is not throttled by its own lock. On PostgreSQL it is one
        autocommit round trip that does not wait for the WAL flush: a decision lost in a crash
        lets one more job through, no more."""
        self._ensure_row(name)
        now = self.dialect.epoch_us()
        interval = int(rate.interval_seconds * 1_000_000)
        tolerance = int(rate.tolerance_seconds * 1_000_000)
        later = sa.case((limit_keys.c.tat_us > now, limit_keys.c.tat_us), else_=now)
        admit = (
            sa.update(limit_keys)
            .where(limit_keys.c.name == name, limit_keys.c.tat_us - now <= tolerance)
            .values(tat_us=later + interval, updated_at=self.dialect.now())
        )
        with self._single(relaxed=True) as conn:
            if conn.execute(admit).rowcount == 1:
                return limits.RateDecision(True)
        with self._single(relaxed=True) as conn:
            ahead: Any = conn.execute(
                sa.select(limit_keys.c.tat_us - now).where(limit_keys.c.name == name)
            ).scalar_one()
        return limits.RateDecision(False, max((int(ahead) - tolerance) / 1_000_000, 0.001))

    # -- concurrency slots -----------------------------------------------------------------------

    def acquire_slot(self, *, name: str, limit: int, claim: Claim) -> bool:
        """Take one of ``limit`` slots of ``name`` for ``claim``; stale slots are freed first."""
        self._ensure_row(name)
        s = concurrency_slots
        running = sa.exists().where(moves.runs(s.c.job_id, s.c.attempt))
        with self._decide() as conn:
            self._lock_row(conn, name)
            conn.execute(sa.delete(s).where(s.c.name == name, ~running))
            held = conn.execute(sa.select(s.c.job_id, s.c.attempt).where(s.c.name == name)).all()
            if any(job_id == claim.job_id for job_id, _ in held):
                conn.execute(
                    sa.update(s)
                    .where(s.c.name == name, s.c.job_id == claim.job_id)
                    .values(attempt=claim.attempt)
                )
                return True
            if len(held) >= limit:
                return False
            conn.execute(
                sa.insert(s).values(
                    name=name,
                    job_id=claim.job_id,
                    attempt=claim.attempt,
                    acquired_at=self.dialect.now(),
                )
            )
        return True

    def release_slot(self, *, name: str, claim: Claim) -> None:
        """Give back ``claim``'s slot of ``name``."""
        s = concurrency_slots
        with self._decide() as conn:
            conn.execute(
                sa.delete(s).where(
                    s.c.name == name, s.c.job_id == claim.job_id, s.c.attempt == claim.attempt
                )
            )

    def count_slots(self, name: str) -> int:
        """Slots of ``name`` held by attempts that are still running."""
        s = concurrency_slots
        stmt = (
            sa.select(sa.func.count())
            .select_from(s.join(jobs, jobs.c.id == s.c.job_id))
            .where(s.c.name == name, moves.runs(s.c.job_id, s.c.attempt))
        )
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    # -- postponing ------------------------------------------------------------------------------

    def postpone_job(self, claim: Claim, *, delay_seconds: float) -> bool:
        """Fenced: running -> scheduled in ``delay_seconds``, ``max_attempts + 1`` so the claim
        that ran nothing costs no attempt (``attempt`` is the fencing token and never drops)."""
        stmt = moves.postpone(self.dialect, claim, delay_seconds)
        with self._decide() as conn:
            return put_back(conn, self.dialect, claim, stmt)

    # -- circuit breakers ------------------------------------------------------------------------

    def _circuit(self, conn: Connection, name: str, *, lock: bool) -> limits.Circuit:
        c = circuit_breakers.c
        stmt = sa.select(circuit_breakers).where(c.name == name)
        if lock:
            stmt = self.dialect.locking(stmt)
        row = conn.execute(stmt).mappings().first()
        return _to_circuit(row) if row is not None else limits.Circuit(name)

    def _save(self, conn: Connection, circuit: limits.Circuit, *, exists: bool) -> None:
        d = self.dialect
        values = {
            "state": circuit.state.value,
            "failures": circuit.failures,
            "opened_at": None if circuit.opened_at is None else d.bind_time(circuit.opened_at),
            "trial_started_at": None
            if circuit.trial_started_at is None
            else d.bind_time(circuit.trial_started_at),
            "updated_at": d.now(),
        }
        t = circuit_breakers
        if exists:
            conn.execute(sa.update(t).where(t.c.name == circuit.name).values(values))
        else:
            conn.execute(sa.insert(t).values(name=circuit.name, **values))

    def _ensure_breaker(self, name: str) -> None:
        if name in self._known:
            return
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    sa.insert(circuit_breakers).values(
                        name=name, state="closed", failures=0, updated_at=self.dialect.now()
                    )
                )
        except sa.exc.IntegrityError:
            pass  # it exists already
        self._known.add(name)

    def admit_breaker(
        self, *, name: str, breaker: limits.Breaker
    ) -> tuple[limits.Admission, float]:
        """Ask the breaker whether a run may go; a due trial is taken under the row lock."""
        with self._read() as conn:
            circuit = self._circuit(conn, name, lock=False)
            verdict = limits.admit(circuit, breaker, self._now(conn))
        if verdict[0] is not limits.Admission.TRIAL:
            return verdict
        with self._decide() as conn:
            circuit = self._circuit(conn, name, lock=True)
            now = self._now(conn)
            verdict = limits.admit(circuit, breaker, now)
            if verdict[0] is limits.Admission.TRIAL:
                self._save(conn, limits.start_trial(circuit, now), exists=True)
        return verdict

    def record_breaker(
        self, *, name: str, breaker: limits.Breaker, succeeded: bool
    ) -> limits.Circuit:
        """Count one run's outcome under the row lock; a success on a closed, clean circuit
        writes nothing (the common case costs one read)."""
        with self._read() as conn:
            current = self._circuit(conn, name, lock=False)
        if succeeded and current.state is limits.CircuitState.CLOSED and current.failures == 0:
            return current
        self._ensure_breaker(name)
        with self._decide() as conn:
            circuit = self._circuit(conn, name, lock=True)
            after = limits.record(circuit, breaker, succeeded=succeeded, now=self._now(conn))
            self._save(conn, after, exists=True)
        return after

    def list_breakers(self) -> list[limits.Circuit]:
        """Every breaker with a row, by name."""
        stmt = sa.select(circuit_breakers).order_by(circuit_breakers.c.name)
        with self._read() as conn:
            return [_to_circuit(row) for row in conn.execute(stmt).mappings()]

    def reset_breaker(self, name: str) -> bool:
        """Close ``name`` and clear its count; False if no such breaker exists."""
        t = circuit_breakers
        stmt = (
            sa.update(t)
            .where(t.c.name == name)
            .values(
                state="closed",
                failures=0,
                opened_at=None,
                trial_started_at=None,
                updated_at=self.dialect.now(),
            )
        )
        with self._begin() as conn:
            return bool(conn.execute(stmt).rowcount == 1)


def _as_time(value: Any) -> datetime:
    """A database clock reading as an aware UTC datetime (SQLite returns text)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return as_utc(value)


def _to_circuit(row: Any) -> limits.Circuit:
    def moment(value: Any) -> datetime | None:
        return None if value is None else as_utc(value)

    return limits.Circuit(
        name=str(row["name"]),
        state=limits.CircuitState(row["state"]),
        failures=int(row["failures"]),
        opened_at=moment(row["opened_at"]),
        trial_started_at=moment(row["trial_started_at"]),
        updated_at=moment(row["updated_at"]),
    )
