"""Redis carries no authority over workers: a stop message published on the control channel
by anyone who can reach Redis only wakes a worker up, and the worker obeys the stop request it
then reads from the database (``ledgerq worker stop`` writes it there first)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledgerq.core import fleet
from ledgerq.runtime.registrar import Registrar
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin
from tests.acceptance.conftest import Ledger, Procs
from tests.helpers import wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)

NAMESPACE = "hostile"
# Heartbeats 20 s apart: a stop that takes effect within seconds came through the Redis wake-up.
ENV_SLOW_BEAT = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "20",
    "LEDGERQ_WORKER_TTL": "60",
    "LEDGERQ_POLL_INTERVAL": "0.2",
    "LEDGERQ_NAMESPACE": NAMESPACE,
}


@pytest.fixture
def db(make_database_url: Callable[[str], str]) -> Iterator[Ledger]:
    view = Ledger(make_database_url("sqlite"))
    yield view
    view.close()


@pytest.fixture
def procs(tmp_path: Path, db: Ledger) -> Iterator[Procs]:
    started = Procs(tmp_path)  # depends on ``db``: every process dies before the database
    try:
        yield started
    finally:
        started.kill_all()


def active_worker_ids(procs: Procs, db: Ledger, env: dict[str, str]) -> list[str]:
    done = procs.run(db.url, "--json", "worker", "list", env=env)
    assert done.returncode == 0, done.stderr
    return [str(row["worker_id"]) for row in json.loads(done.stdout)]


def test_a_forged_stop_message_does_not_stop_a_worker(
    db: Ledger, procs: Procs, redis_server: RedisServer
) -> None:
    env = {**ENV_SLOW_BEAT, "LEDGERQ_REDIS_URL": redis_server.url}
    worker = procs.worker(db.url, "--concurrency", "2", env=env)
    (worker_id,) = wait_until(
        lambda: active_worker_ids(procs, db, env) or None, timeout=30, what="registered"
    )
    channel = f"{NAMESPACE}:0:control"
    with redis_server.client() as attacker:
        wait_until(
            lambda: dict(attacker.pubsub_numsub(channel)).get(channel.encode(), 0) > 0,
            timeout=10,
            what="the worker subscribed to the control channel",
        )
        # Everyone, then this worker by its id, in both modes: no row in the database asks.
        for target in (None, worker_id):
            for mode in ("immediate", "graceful"):
                message = json.dumps({"worker_id": target, "mode": mode})
                assert attacker.publish(channel, message) == 1
    job_id = db.effects.record_effect.enqueue("after-the-forgery").job_id
    wait_until(lambda: db.jobs()[job_id].state == "succeeded", timeout=20, what="the job ran")
    assert worker.running(), worker.log()[-3000:]
    assert active_worker_ids(procs, db, env) == [worker_id]
    # A real stop is written to the database first; the Redis wake-up makes it prompt.
    asked_at = time.monotonic()
    done = procs.run(db.url, "worker", "stop", "--worker-id", worker_id, env=env)
    assert done.returncode == 0, done.stderr
    assert worker.wait(10) == 0, worker.log()[-3000:]
    assert time.monotonic() - asked_at < 5
    assert "stop requested through the database" in worker.log()


class Member:
    """The worker side of a registrar, recording what it was asked to do."""

    def __init__(self) -> None:
        self.stops: list[bool] = []

    def pulse(self) -> fleet.Pulse:
        return fleet.Pulse(0, 0, None)

    def abandon_lost_jobs(self) -> int:
        return 0

    def request_stop(self, *, immediate: bool = False) -> None:
        self.stops.append(immediate)

    def share_with_peers(self, peers_per_slot: float | None) -> None:
        pass

    def announce_requeued(self, job_ids: list[int]) -> None:
        pass

    def transport_round_trip_ms(self) -> float | None:
        return None

    def lease_confirmed(self, sent_at: float) -> None:
        pass


def test_a_flood_of_wake_ups_neither_stops_nor_starves_the_heartbeat(
    make_database_url: Callable[[str], str],
) -> None:
    engine = create_engine(make_database_url("sqlite"))
    store = SqlFleetAdmin(engine)
    member = Member()
    registration = fleet.Registration("h:1:a", "h", 1, ("q",), concurrency=1, version="t")
    registrar = Registrar(
        store,
        registration,
        member,
        interval_seconds=0.2,
        health_interval_seconds=60,
        stall_after_seconds=60,
    )
    registrar.start()
    try:
        (first,) = store.list_workers()
        flood_until = time.monotonic() + 1.5
        while time.monotonic() < flood_until:
            registrar.check_stop_request()
            time.sleep(0.001)
        (after,) = store.list_workers()
        assert after.heartbeat_at > first.heartbeat_at  # heartbeats went on during the flood
        assert member.stops == []
        # Spaced reads: about ten a second however many messages arrive.
        assert 1 <= registrar.unbacked_wake_ups <= 20
        store.request_stop(worker_id="h:1:a", mode=fleet.StopMode.GRACEFUL)
        registrar.check_stop_request()
        wait_until(lambda: member.stops == [False], timeout=5, what="the stop obeyed")
    finally:
        registrar.stop()
        engine.dispose()
