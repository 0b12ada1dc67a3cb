"""SqlScheduleStore: the ScheduleStore port over the ``schedules`` and ``schedule_runs`` tables.

A tick fires exactly once fleet-wide: its job and its unique ``(schedule, tick)`` run row are
written in one transaction, so a second instance firing the same tick fails on the key and its
job rolls back with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core import errors
from ledgerq.core.job import NewJob, as_utc
from ledgerq.core.schedules import (
    FireOutcome,
    FireResult,
    MissedPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleExists,
    ScheduleRun,
    ScheduleSource,
    ScheduleState,
)
from ledgerq.core.states import UNFINISHED
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.tables import jobs, schedule_runs, schedules
from ledgerq.store.transactions import SqlTransactions, translate_error


def _time(value: Any) -> datetime | None:
    if isinstance(value, str):  # SQLite returns its clock as text
        value = datetime.fromisoformat(value)
    return as_utc(value) if isinstance(value, datetime) else None


def _state(row: Any) -> ScheduleState:
    schedule = Schedule(
        name=row.name,
        cron=row.cron,
        task=row.task,
        args_json=row.args,
        tz=row.tz,
        queue=row.queue,
        missed=MissedPolicy(row.missed),
        max_catchup=int(row.max_catchup),
        overlap=OverlapPolicy(row.overlap),
        source=ScheduleSource(row.source),
    )
    return ScheduleState(schedule, bool(row.paused), _time(row.last_tick), _time(row.next_tick))


class SqlScheduleStore(SqlTransactions):
    """Schedules and their runs; jobs are inserted through ``job_store`` in the same
    transaction as their run row."""

    def __init__(self, job_store: SqlJobStore) -> None:
        super().__init__(job_store.engine)
        self._jobs = job_store

    def database_now(self) -> datetime:
        """The database clock, aware UTC."""
        with self._read() as conn:
            now = _time(conn.execute(sa.select(self.dialect.now())).scalar_one())
        assert now is not None
        return now

    def _definition(self, schedule: Schedule) -> dict[str, Any]:
        return {
            "cron": schedule.cron,
            "tz": schedule.tz,
            "task": schedule.task,
            "args": schedule.args_json,
            "queue": schedule.queue,
            "missed": schedule.missed.value,
            "max_catchup": schedule.max_catchup,
            "overlap": schedule.overlap.value,
        }

    def _insert(self, conn: Connection, schedule: Schedule) -> None:
        now = self.dialect.now()
        conn.execute(
            schedules.insert().values(
                name=schedule.name,
                source=schedule.source.value,
                paused=False,
                created_at=now,
                updated_at=now,
                **self._definition(schedule),
            )
        )

    def upsert_schedules(self, declared: list[Schedule]) -> None:
        """Create or update code-declared schedules; pause state and progress are kept. Two
        schedulers starting at once may both insert: the loser updates instead."""
        for schedule in declared:
            for _ in range(2):
                try:
                    with self._begin() as conn:
                        self._upsert_one(conn, schedule)
                    break
                except errors.StoreError:
                    continue  # a concurrent insert of the same name: the retry updates it
            else:
                raise errors.StoreError(f"could not store schedule {schedule.name!r}")

    def _upsert_one(self, conn: Connection, schedule: Schedule) -> None:
        stmt = (
            sa.update(schedules)
            .where(schedules.c.name == schedule.name)
            .values(
                source=schedule.source.value,
                updated_at=self.dialect.now(),
                **self._definition(schedule),
            )
        )
        exists = conn.execute(
            sa.select(sa.literal(1)).where(schedules.c.name == schedule.name)
        ).first()
        if exists is not None:
            conn.execute(stmt)
        else:
            self._insert(conn, schedule)

    def add_schedule(self, schedule: Schedule) -> None:
        """Create a schedule; ``ScheduleExists`` if the name is taken."""
        try:
            with self.engine.begin() as conn:
                self._insert(conn, schedule)
        except sa.exc.IntegrityError:
            raise ScheduleExists(schedule.name) from None
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc

    def remove_schedule(self, name: str) -> bool:
        """Delete a schedule; its run history stays."""
        with self._begin() as conn:
            return conn.execute(sa.delete(schedules).where(schedules.c.name == name)).rowcount == 1

    def set_paused(self, name: str, paused: bool) -> bool:
        """Pause or resume; resuming clears the progress so the pause's ticks never run."""
        values: dict[str, Any] = {"paused": paused, "updated_at": self.dialect.now()}
        if not paused:
            values.update(last_tick=None, next_tick=None)
        stmt = sa.update(schedules).where(schedules.c.name == name).values(values)
        with self._begin() as conn:
            return conn.execute(stmt).rowcount == 1

    def list_schedules(self) -> list[ScheduleState]:
        """Every schedule, by name."""
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(
                sa.select(schedules).order_by(schedules.c.name)
            ).all()
        return [_state(row) for row in rows]

    def fire_tick(
        self, schedule: Schedule, tick: datetime, job: NewJob, *, executed_by: str
    ) -> FireResult:
        """Insert the tick's job and run row in one transaction (see the module docstring)."""
        bound_tick = self.dialect.bind_time(as_utc(tick))
        try:
            with self.engine.begin() as conn:
                return self._fire(conn, schedule, bound_tick, job, executed_by)
        except sa.exc.IntegrityError as exc:
            if self._run_exists(schedule.name, bound_tick):
                return FireResult(FireOutcome.TAKEN)
            raise translate_error(exc) from exc
        except sa.exc.DBAPIError as exc:
            raise translate_error(exc) from exc

    def _fire(
        self, conn: Connection, schedule: Schedule, tick: Any, job: NewJob, executed_by: str
    ) -> FireResult:
        paused = conn.execute(
            sa.select(schedules.c.paused).where(schedules.c.name == schedule.name)
        ).first()
        if paused is None or paused[0]:
            return FireResult(FireOutcome.INACTIVE)
        job_id: int | None = None
        outcome = FireOutcome.SKIPPED_OVERLAP
        if schedule.overlap is OverlapPolicy.ALLOW or not self._previous_unfinished(conn, schedule):
            job_id = self._jobs.insert_jobs([job], connection=conn)[0].job_id
            outcome = FireOutcome.FIRED
        # The unique key: a second instance's insert fails here and its job rolls back.
        conn.execute(
            schedule_runs.insert().values(
                schedule=schedule.name,
                tick=tick,
                job_id=job_id,
                executed_by=executed_by[:160],
                created_at=self.dialect.now(),
            )
        )
        return FireResult(outcome, job_id)

    def _previous_unfinished(self, conn: Connection, schedule: Schedule) -> bool:
        last_job = (
            sa.select(schedule_runs.c.job_id)
            .where(schedule_runs.c.schedule == schedule.name, schedule_runs.c.job_id.is_not(None))
            .order_by(schedule_runs.c.tick.desc())
            .limit(1)
            .scalar_subquery()
        )
        state = conn.execute(sa.select(jobs.c.state).where(jobs.c.id == last_job)).scalar()
        return state is not None and state in {s.value for s in UNFINISHED}

    def _run_exists(self, name: str, tick: Any) -> bool:
        stmt = sa.select(sa.literal(1)).where(
            schedule_runs.c.schedule == name, schedule_runs.c.tick == tick
        )
        with self._read() as conn:
            return conn.execute(stmt).first() is not None

    def advance(self, name: str, *, last_tick: datetime, next_tick: datetime | None) -> None:
        """Record progress up to ``last_tick``; an older value never overwrites a newer one."""
        bound = self.dialect.bind_time(as_utc(last_tick))
        stmt = (
            sa.update(schedules)
            .where(
                schedules.c.name == name,
                sa.or_(schedules.c.last_tick.is_(None), schedules.c.last_tick < bound),
            )
            .values(
                last_tick=bound,
                next_tick=None if next_tick is None else self.dialect.bind_time(as_utc(next_tick)),
            )
        )
        with self._begin() as conn:
            conn.execute(stmt)

    def list_runs(self, name: str, *, limit: int = 100) -> list[ScheduleRun]:
        """Newest runs first."""
        stmt = (
            sa.select(schedule_runs)
            .where(schedule_runs.c.schedule == name)
            .order_by(schedule_runs.c.tick.desc())
            .limit(limit)
        )
        with self._read() as conn:
            rows: Sequence[Any] = conn.execute(stmt).all()
        return [
            ScheduleRun(
                r.schedule,
                _time(r.tick) or datetime.min,
                None if r.job_id is None else int(r.job_id),
                r.executed_by,
            )
            for r in rows
        ]
