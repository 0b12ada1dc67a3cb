"""The FleetView contract, over every implementation (``FLEET_VIEWS``) on every database:
every known worker once, with its running jobs, most recently seen first."""

from __future__ import annotations

import time

from tests.contract.conftest import Fleet


def test_known_workers_are_listed_once_most_recently_seen_first(fleet_view: Fleet) -> None:
    assert list(fleet_view.view.list_workers()) == []
    fleet_view.see("w-old", 1)
    time.sleep(0.1)
    fleet_view.see("w-new", 2)
    workers = list(fleet_view.view.list_workers())
    assert [(w.worker_id, w.running_jobs) for w in workers] == [("w-new", 2), ("w-old", 1)]
    assert all(w.queues == ("q",) and w.last_heartbeat_at is not None for w in workers)
