"""Workers ride out a database restart: PostgreSQL stopped immediately (a crash) in the middle
of a run and started again. The workers reconnect by themselves and carry on; nothing is lost
and no job is completed twice. The server is a private cluster of this test (the shared
PostgreSQL is never restarted)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.private_servers import PrivatePostgres
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

# A TTL longer than the outage: the point is riding it out, not failing over.
ENV = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "0.5",
    "LEDGERQ_WORKER_TTL": "6",
    "LEDGERQ_FAILOVER_CHECK_INTERVAL": "0.5",
}
JOBS = 3000


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.close()


def test_workers_ride_out_a_postgresql_crash_and_restart(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    engine = create_engine(private_postgres.url)
    migrate(engine)
    engine.dispose()
    db = Ledger(private_postgres.url)
    procs = Procs(tmp_path)
    try:
        keys = {f"r{i:05d}" for i in range(JOBS)}
        # The tasks' own engine also loses its connections in the crash: a run that fails
        # on them is retried like any failed job.
        db.effects.resilient.enqueue_many([(k,) for k in sorted(keys)])
        workers = [procs.worker(db.url, "--concurrency", "4", env=ENV) for _ in range(2)]
        wait_until(lambda: db.effect_count() > 200, timeout=60, what="work under way")
        db.engine.dispose()
        private_postgres.stop_immediately()
        down_at = time.monotonic()
        while time.monotonic() - down_at < 2.0:  # the outage itself: a fixed 2 s by design
            assert all(w.running() for w in workers), "a worker died with the database"
            time.sleep(0.1)
        private_postgres.start()
        wait_until(
            lambda: db.states() == {"succeeded": JOBS},
            timeout=120,
            what="every job succeeded after the restart",
        )
        retried = sum(1 for row in db.jobs().values() if row.attempt > 1)
        print(f"\n{retried} job(s) ran again after failing on the tasks' own lost connections")
        assert set(db.effect_rows()) == keys
        assert db.duplicate_rows() == [], "a job's effect ran twice"
        assert all(w.running() for w in workers)
        for worker in workers:
            worker.signal(signal.SIGTERM)
        for worker in workers:
            assert worker.wait(30) == 0, worker.log()
        logs = "".join(w.log() for w in workers)
        assert "database unavailable" in logs  # they did see the outage
        assert "declared dead by the fleet" not in logs  # and nobody was failed over for it
    finally:
        procs.kill_all()
        db.close()
