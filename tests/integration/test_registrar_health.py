"""The registrar's health checks feed the health metrics and the worker's readiness: each
recorded check is one ``HealthChecked`` event (failed when it found a problem), a worker
that stopped fetching while jobs wait is not consuming, and one whose heartbeats fail cannot
reach its database."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from ledgerq.core import fleet
from ledgerq.core.job import NewJob
from ledgerq.core.operations import Event, HealthChecked
from ledgerq.runtime.registrar import Registrar
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.tables import worker_health_checks


class Member:
    """The worker side the registrar talks to; ``fetch_age`` is what its pulse reports."""

    def __init__(self) -> None:
        self.fetch_age = 0.0

    def pulse(self) -> fleet.Pulse:
        return fleet.Pulse(0, 0, self.fetch_age)

    def abandon_lost_jobs(self) -> int:
        return 0

    def request_stop(self, *, immediate: bool = False) -> None:
        return None

    def share_with_peers(self, peers_per_slot: float | None) -> None:
        return None

    def announce_requeued(self, job_ids: list[int]) -> None:
        return None

    def transport_round_trip_ms(self) -> float | None:
        return None

    def lease_confirmed(self, sent_at: float) -> None:
        return None


class ListSink:
    """An EventSink that keeps what it is given."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)


@pytest.fixture
def engine(make_database_url: Callable[[str], str]) -> Iterator[sa.Engine]:
    made = create_engine(make_database_url("sqlite"))
    yield made
    made.dispose()


def test_health_checks_are_events_and_decide_readiness(engine: sa.Engine) -> None:
    sink = ListSink()
    events = sink.events
    member = Member()
    registration = fleet.Registration("w-1", "host", 1, ("q",), 1, "test")
    registrar = Registrar(
        SqlFleetAdmin(engine),
        registration,
        member,
        interval_seconds=3600,  # the test beats and checks by hand
        health_interval_seconds=3600,
        stall_after_seconds=5,
        events=sink,
    )
    registrar.start()
    try:
        assert all(ok for ok, _ in registrar.readiness().values())
        registrar.check_health()
        assert events == [HealthChecked(ok=True)]

        # Not fetching for longer than the stall limit: healthy while nothing waits ...
        member.fetch_age = 60.0
        registrar.check_health()
        assert events[-1] == HealthChecked(ok=True)
        # ... not consuming once a job of its queues waits.
        SqlJobStore(engine).insert_jobs([NewJob(task="t", queue="q", args_json="{}")])
        registrar.check_health()
        assert events[-1] == HealthChecked(ok=False)
        ok, detail = registrar.readiness()["consuming"]
        assert not ok and "wait" in detail
        with engine.connect() as conn:
            rows = conn.execute(sa.select(sa.func.count()).select_from(worker_health_checks))
            assert rows.scalar_one() == len(events) == 3  # one event per recorded check

        # The database refuses its heartbeats: it cannot reach its database.
        member.fetch_age = 0.0
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TABLE queue_workers"))
        registrar.beat()
        ok, _ = registrar.readiness()["database"]
        assert not ok
        registrar.check_health()
        assert events[-1] == HealthChecked(ok=False)
    finally:
        registrar.stop()
