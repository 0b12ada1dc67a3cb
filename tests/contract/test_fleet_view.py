"""The FleetView contract, over every implementation (``FLEET_VIEWS``) on every database:
every known worker once, with its running jobs, most recently seen first; stopped and dead
workers (which only the registry knows) only when asked, after the active ones."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from ledgerq.app.operations_surface import RegistryFleetView
from ledgerq.core import fleet
from ledgerq.store.fleet_admin import SqlFleetAdmin
from ledgerq.store.tables import queue_workers
from tests.contract.conftest import Fleet


def test_known_workers_are_listed_once_most_recently_seen_first(fleet_view: Fleet) -> None:
    assert list(fleet_view.view.list_workers()) == []
    fleet_view.see("w-old", 1)
    time.sleep(0.1)
    fleet_view.see("w-new", 2)
    workers = list(fleet_view.view.list_workers())
    assert [(w.worker_id, w.running_jobs) for w in workers] == [("w-new", 2), ("w-old", 1)]
    assert all(w.queues == ("q",) and w.last_heartbeat_at is not None for w in workers)


def test_inactive_workers_are_listed_only_when_asked(fleet_view: Fleet) -> None:
    fleet_view.see("w-1", 1)
    active = [w.worker_id for w in fleet_view.view.list_workers()]
    assert [w.worker_id for w in fleet_view.view.list_workers(include_inactive=True)] == active


def test_the_registry_lists_stopped_and_dead_workers_after_the_active_ones(
    engine: sa.Engine,
) -> None:
    admin = SqlFleetAdmin(engine)
    for worker_id in ("w-stopped", "w-dead", "w-live"):
        admin.register_worker(fleet.Registration(worker_id, "host-1", 7, ("q",), 4, "1"))
    assert admin.deregister_worker("w-stopped")
    # w-dead stopped heartbeating an hour ago: the failover check marks it dead.
    an_hour_ago = admin.failover.dialect.bind_time(datetime.now(UTC) - timedelta(hours=1))
    with engine.begin() as conn:
        stale = sa.update(queue_workers).where(queue_workers.c.id == "w-dead")
        conn.execute(stale.values(heartbeat_at=an_hour_ago))
    assert [e.worker_id for e in admin.fail_over_workers(ttl_seconds=60, detected_by="t")] == [
        "w-dead"
    ]
    view = RegistryFleetView(admin)
    assert [w.worker_id for w in view.list_workers()] == ["w-live"]
    listed = view.list_workers(include_inactive=True)
    assert listed[0].worker_id == "w-live" and listed[0].stopped_at is None
    gone = {w.worker_id: w for w in listed[1:]}
    assert {w: v.status for w, v in gone.items()} == {"w-stopped": "stopped", "w-dead": "dead"}
    assert all(v.hostname == "host-1" and v.running_jobs == 0 for v in gone.values())
    assert gone["w-stopped"].stopped_at is not None
    view.INACTIVE_LISTED = 1  # only the most recently seen of the two
    assert [w.worker_id for w in view.list_workers(include_inactive=True)] == [
        "w-live",
        "w-stopped",
    ]
