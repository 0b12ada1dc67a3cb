"""Workflows over real worker processes: 100 diamond workflows on two workers, one killed with
SIGKILL mid-run (PostgreSQL; MariaDB too with ``LEDGERQ_SOAK=1``). Every workflow completes,
every step completes exactly once (one ``workflow:step:complete`` event and one succeeded job
per step), results reach the fan-in step, and only the steps the kill interrupted ran twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq.core import workflow as wf
from ledgerq.store.tables import jobs, workflow_events, workflows
from tests.acceptance import workflow_app
from tests.acceptance.conftest import CLI, REPO_ROOT, Ledger, cli_env
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

FLOWS = 100
# About 40 s per backend on a loaded 2-core machine: MariaDB joins under LEDGERQ_SOAK=1 (the
# store-level workflow tests run on all three databases in tests/integration).
BACKENDS = ["postgresql", "mysql"] if os.environ.get("LEDGERQ_SOAK") else ["postgresql"]
FLEET_ENV = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "0.3",
    "LEDGERQ_WORKER_TTL": "1.5",
    "LEDGERQ_FAILOVER_CHECK_INTERVAL": "0.3",
}


@pytest.fixture
def workers(
    tmp_path: Path, ledger: Callable[[str], Ledger]
) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Starts workers of ``workflow_app``; kills the survivors before the database is dropped."""
    started: list[subprocess.Popen[bytes]] = []

    def start(url: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"worker-{len(started)}.stderr").open("wb") as log:
            proc = subprocess.Popen(
                [
                    *CLI,
                    "--app",
                    "tests.acceptance.workflow_app:app",
                    "worker",
                    "start",
                    "--concurrency",
                    "4",
                    "--poll-interval",
                    "0.1",
                ],
                cwd=REPO_ROOT,
                env=cli_env(url, FLEET_ENV),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def count(db: Ledger, stmt: sa.Select[tuple[int]]) -> int:
    with db.engine.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


@pytest.mark.parametrize("backend", BACKENDS)
def test_100_workflows_complete_once_when_a_worker_is_killed(
    backend: str, ledger: Callable[[str], Ledger], workers: Callable[[str], subprocess.Popen[bytes]]
) -> None:
    db = ledger(backend)
    app = workflow_app.make_app(database_url=db.url)
    step = app.registry.get(workflow_app.STEP)
    call = lambda key: wf.StepCall(step.name, (key, 0.02))  # noqa: E731
    try:
        ids = []
        for n in range(FLOWS):
            flow = app.workflow(f"diamond-{n}")
            a = flow.step(call(f"{n}-a"), name="a")
            b = flow.step(call(f"{n}-b"), after=[a], name="b")
            c = flow.step(call(f"{n}-c"), after=[a], name="c")
            flow.step(call(f"{n}-d"), after=[b, c], name="d")
            ids.append(flow.enqueue())
    finally:
        app.close()
    keys = {f"{n}-{s}" for n in range(FLOWS) for s in "abcd"}

    victim, survivor = workers(db.url), workers(db.url)
    wait_until(lambda: db.effect_count() >= len(keys) // 4, timeout=120, what="a quarter done")
    # Killed while it holds steps (claimed or running), so the kill interrupts one.
    holding = (
        sa.select(sa.func.count())
        .select_from(jobs)
        .where(jobs.c.state == "running", jobs.c.worker_id.like(f"%:{victim.pid}:%"))
    )
    wait_until(lambda: count(db, holding) > 0, timeout=60, what="the victim holds a step")
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL

    succeeded = (
        sa.select(sa.func.count()).select_from(workflows).where(workflows.c.state == "succeeded")
    )
    wait_until(lambda: count(db, succeeded) == FLOWS, timeout=180, what="every workflow done")
    assert survivor.poll() is None

    # Every step completed exactly once: one step-complete event per (workflow, step) ...
    with db.engine.connect() as conn:
        events = conn.execute(
            sa.select(workflow_events.c.workflow_id, workflow_events.c.step).where(
                workflow_events.c.type == wf.STEP_COMPLETE
            )
        ).all()
        step_jobs = conn.execute(
            sa.select(jobs.c.id, jobs.c.state, jobs.c.attempt, jobs.c.result)
        ).all()
    per_step = Counter((w, s) for w, s in events)
    assert len(per_step) == 4 * FLOWS and set(per_step.values()) == {1}
    # ... and one job per step, all succeeded (a rerun is a new attempt of the same job).
    assert len(step_jobs) == 4 * FLOWS
    assert {row.state for row in step_jobs} == {"succeeded"}
    # Every effect exists; only a step interrupted by the kill may have run twice.
    assert set(db.effect_rows()) == keys
    rerun = {row.id for row in step_jobs if row.attempt > 1}
    assert rerun, "the kill interrupted no step; the test proved nothing"
    assert {job_id for _, job_id, _ in db.duplicate_rows()} <= rerun
    # The fan-in step of every workflow received both branch results.
    results = [json.loads(row.result) for row in step_jobs]
    fan_ins = {r["key"]: r["received"] for r in results if r["key"].endswith("-d")}
    assert len(fan_ins) == FLOWS
    assert all(got == [f"{key[:-2]}-b", f"{key[:-2]}-c"] for key, got in fan_ins.items())
