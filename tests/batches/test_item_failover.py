"""Batch items with real worker processes: SIGKILL the worker twice in the middle of a
10,000-item job. The job completes on a later attempt, every item's effect exists exactly
once, and each attempt was given only the items no earlier attempt had committed."""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq.store.engine import create_engine
from ledgerq.store.tables import job_items, jobs
from tests.acceptance.conftest import CLI, REPO_ROOT, cli_env
from tests.batches import items_app
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(600)
Worker = subprocess.Popen[bytes]

TOTAL = 10_000
CHUNK, PAUSE = 50, 0.02  # 200 transactions of 50 items: a few seconds per full run
APP_REF = "tests.batches.items_app:app"
FLEET_ENV = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "0.3",
    "LEDGERQ_WORKER_TTL": "2",
    "LEDGERQ_FAILOVER_CHECK_INTERVAL": "0.3",
    "LEDGERQ_QUEUES": items_app.QUEUE,
}


class Ledger:
    """The test's view of the job, its items and their effects."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, pool_size=2)
        items_app.metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def scalar(self, stmt: sa.Select[tuple[int]]) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(stmt).scalar_one())

    def effects(self) -> int:
        return self.scalar(sa.select(sa.func.count()).select_from(items_app.item_effects))

    def effect_attempts(self) -> dict[str, list[int]]:
        t = items_app.item_effects
        found: dict[str, list[int]] = {}
        with self.engine.connect() as conn:
            for key, attempt in conn.execute(sa.select(t.c.item_key, t.c.attempt)):
                found.setdefault(key, []).append(int(attempt))
        return found

    def job(self, job_id: int) -> sa.Row[tuple[str, int]]:
        with self.engine.connect() as conn:
            stmt = sa.select(jobs.c.state, jobs.c.attempt).where(jobs.c.id == job_id)
            return conn.execute(stmt).one()

    def item_attempts(self) -> Counter[int]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(job_items.c.attempt, sa.func.count()).group_by(job_items.c.attempt)
            )
            return Counter({int(a): int(n) for a, n in rows})


def start_worker(url: str, tmp_path: Path, workers: list[Worker]) -> subprocess.Popen[bytes]:
    with (tmp_path / f"worker-{len(workers)}.stderr").open("wb") as log:
        proc = subprocess.Popen(
            [*CLI, "--app", APP_REF, "worker", "start", "--concurrency", "1"],
            cwd=REPO_ROOT,
            env=cli_env(url, FLEET_ENV),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    workers.append(proc)
    return proc


# SQLite passes too, but each run costs half a minute of worker start-ups: soak runs only.
BACKENDS = ["postgresql", "mysql", *(["sqlite"] if os.environ.get("LEDGERQ_SOAK") else [])]


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_sigkill_twice_mid_batch_resumes_with_each_item_done_exactly_once(
    backend_name: str, make_database_url: Callable[[str], str], tmp_path: Path
) -> None:
    url = make_database_url(backend_name)
    db = Ledger(url)
    app = items_app.make_app(database_url=url)
    workers: list[Worker] = []
    try:
        args = (TOTAL, str(tmp_path), CHUNK, PAUSE)
        job_id = app.client.enqueue([app.client.build(items_app.PROCESS, args)])[0].job_id
        for _ in range(2):
            proc = start_worker(url, tmp_path, workers)
            floor = db.effects() + TOTAL // 4
            wait_until(lambda f=floor: db.effects() >= f, timeout=120, what="progress")  # type: ignore[misc]
            proc.kill()  # SIGKILL, in the middle of the batch
            proc.wait(10)
        start_worker(url, tmp_path, workers)
        wait_until(lambda: db.job(job_id).state == "succeeded", timeout=180, what="job done")
    finally:
        for proc in workers:
            proc.kill()
            proc.wait(10)
        app.close()
    try:
        _assert_each_item_once(db, job_id, tmp_path)
    finally:
        db.close()


def _assert_each_item_once(db: Ledger, job_id: int, tmp_path: Path) -> None:

    effects = db.effect_attempts()
    # Every item's effect exists, and exactly once.
    assert sorted(effects) == items_app.item_keys(TOTAL)
    assert [k for k, attempts in effects.items() if len(attempts) != 1] == []
    # The item records agree with the effects, attempt by attempt; at least three attempts
    # (two killed, one that finished) each recorded items.
    by_attempt = Counter(attempts[0] for attempts in effects.values())
    assert db.item_attempts() == by_attempt
    assert len(by_attempt) >= 3 and db.job(job_id).attempt == max(by_attempt)
    # Each attempt was handed only items that no earlier attempt had committed.
    for attempt in sorted(by_attempt)[1:]:
        handed = (tmp_path / f"attempt-{attempt}.log").read_text().split()
        earlier = {k for k, (a,) in effects.items() if a < attempt}
        assert handed and not set(handed) & earlier
        assert len(handed) == len(set(handed))
