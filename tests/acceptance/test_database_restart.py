"""Workers ride out a database restart: PostgreSQL stopped immediately (a crash), and MariaDB
killed with SIGKILL, in the middle of a run, then started again. The workers reconnect by
themselves and carry on; nothing is lost and no job is completed twice in the ledger. Each
server is private to its test (the shared servers are never restarted)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.private_servers import PrivateMariadb, PrivatePostgres
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

# A TTL longer than the outage: the point is riding it out, not failing over.
ENV = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "0.5",
    "LEDGERQ_WORKER_TTL": "6",
    "LEDGERQ_FAILOVER_CHECK_INTERVAL": "0.5",
}
JOBS = 3000


@pytest.fixture(params=["postgresql", "mariadb"])
def server(request: pytest.FixtureRequest) -> Iterator[PrivatePostgres | PrivateMariadb]:
    made = PrivatePostgres() if request.param == "postgresql" else PrivateMariadb()
    try:
        yield made
    finally:
        made.close()


def crash(server: PrivatePostgres | PrivateMariadb) -> None:
    if isinstance(server, PrivatePostgres):
        server.stop_immediately()
    else:
        server.kill()


def test_workers_ride_out_a_database_crash_and_restart(
    server: PrivatePostgres | PrivateMariadb, tmp_path: Path
) -> None:
    engine = create_engine(server.url)
    migrate(engine)
    engine.dispose()
    db = Ledger(server.url)
    procs = Procs(tmp_path)
    try:
        keys = {f"r{i:05d}" for i in range(JOBS)}
        # The tasks' own engine also loses its connections in the crash: a run that fails
        # on them is retried like any failed job.
        db.effects.resilient.enqueue_many([(k,) for k in sorted(keys)])
        workers = [procs.worker(db.url, "--concurrency", "4", env=ENV) for _ in range(2)]
        wait_until(lambda: db.effect_count() > 200, timeout=60, what="work under way")
        db.engine.dispose()
        crash(server)
        down_at = time.monotonic()
        while time.monotonic() - down_at < 2.0:  # the outage itself: a fixed 2 s by design
            assert all(w.running() for w in workers), "a worker died with the database"
            time.sleep(0.1)
        server.start()
        wait_until(
            lambda: db.states() == {"succeeded": JOBS},
            timeout=120,
            what="every job succeeded after the restart",
        )
        retried = sum(1 for row in db.jobs().values() if row.attempt > 1)
        print(
            f"\n{retried} job(s) ran again after failing on the tasks' own lost connections,"
            f" {len(db.duplicate_rows())} of them after their effect had committed"
        )
        assert set(db.effect_rows()) == keys
        # The ledger completed each job once. The tasks' own effect writes are not fenced: a
        # commit the server applied just before it died looks failed to the task, whose job
        # then runs again (at-least-once). So a second effect may only come from a later
        # attempt of a job whose earlier attempt wrote it, never from the same attempt.
        effects = db.effect_rows()
        for key, job_id, attempt in db.duplicate_rows():
            first = effects[key]
            assert first.job_id == job_id and first.attempt < attempt, (key, job_id, attempt)
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
