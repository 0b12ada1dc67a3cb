"""Real ``ledgerq scheduler`` processes: three per database fire an every-second schedule for
100 ticks while one is SIGKILLed and restarted midway; every tick gets exactly one job.

The three databases run side by side in one test, so the 100 s of ticks are paid once.
A worker started with ``--scheduler`` fires and runs the schedule's jobs itself.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq.core.job import as_utc
from ledgerq.store.engine import create_engine
from ledgerq.store.tables import jobs, schedule_runs
from tests.helpers import wait_until
from tests.redis_server import free_port
from tests.scheduler.sched_app import EVERY_SECOND, TICK_TASK

REPO_ROOT = Path(__file__).resolve().parents[2]
APP = "tests.scheduler.sched_app:app"
TICKS = 100
KILL_AT_TICK = 40


class Processes:
    """``ledgerq --app sched_app ...`` subprocesses; stderr to files; leftovers killed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, url: str, *args: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}
        env["LEDGERQ_DATABASE_URL"] = url
        log = self.directory / f"proc-{len(self.started)}.stderr"
        with log.open("wb") as stderr:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ledgerq.cli.main", "--app", APP, *args],
                cwd=REPO_ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        proc.log = log  # type: ignore[attr-defined]
        self.started.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


class Ledger:
    """What the test reads from one database."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = create_engine(url, pool_size=2)

    def runs(self) -> list[sa.Row[tuple[datetime, int | None, str]]]:
        stmt = sa.select(schedule_runs.c.tick, schedule_runs.c.job_id, schedule_runs.c.executed_by)
        with self.engine.connect() as conn:
            return list(conn.execute(stmt.where(schedule_runs.c.schedule == EVERY_SECOND)))

    def latest_tick(self) -> datetime | None:
        stmt = sa.select(sa.func.max(schedule_runs.c.tick))
        with self.engine.connect() as conn:
            value = conn.execute(stmt).scalar()
        return as_utc(value) if value is not None else None

    def tick_jobs(self) -> dict[int, str]:
        stmt = sa.select(jobs.c.id, jobs.c.state).where(jobs.c.task == TICK_TASK)
        with self.engine.connect() as conn:
            return {int(i): str(s) for i, s in conn.execute(stmt)}


def scheduler_args() -> tuple[str, ...]:
    return ("scheduler", "--poll-interval", "0.5")


def wait_for_tick(ledgers: list[Ledger], tick: datetime, timeout: float, what: str) -> None:
    """Wait until every ledger has fired ``tick``."""
    for lg in ledgers:
        wait_until(lambda lg=lg: (lg.latest_tick() or tick) > tick, timeout, what, 0.25)


def stop_all(fleets: list[list[subprocess.Popen[bytes]]]) -> None:
    """SIGTERM every scheduler; each must exit cleanly."""
    procs = [proc for fleet in fleets for proc in fleet]
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(30) == 0, proc.log.read_text()  # type: ignore[attr-defined]


@pytest.mark.timeout(600)
def test_three_schedulers_fire_each_of_100_ticks_once_across_a_kill(
    make_database_url: Callable[[str], str], processes: Processes
) -> None:
    ledgers = [Ledger(make_database_url(b)) for b in ("postgresql", "mysql", "sqlite")]
    fleets = [[processes.start(lg.url, *scheduler_args()) for _ in range(3)] for lg in ledgers]
    try:
        # Every instance is up and the schedule fires: the window starts a little later.
        firsts = [wait_until(lg.latest_tick, 150, "first tick", 0.25) for lg in ledgers]
        for proc in (p for fleet in fleets for p in fleet):
            wait_until(lambda p=proc: b"running" in p.log.read_bytes(), 60, "start")  # type: ignore[attr-defined]
        start = max(firsts) + timedelta(seconds=5)
        end = start + timedelta(seconds=TICKS - 1)
        wait_for_tick(ledgers, start + timedelta(seconds=KILL_AT_TICK), 90, "kill tick")
        for fleet, lg in zip(fleets, ledgers, strict=True):
            fleet[0].send_signal(signal.SIGKILL)
            fleet[0].wait(10)
            fleet[0] = processes.start(lg.url, *scheduler_args())
        wait_for_tick(ledgers, end, TICKS + 60, "last tick")
        stop_all(fleets)
        for lg in ledgers:
            check_every_tick_fired_once(lg, start, end)
    finally:
        for lg in ledgers:
            lg.engine.dispose()


def check_every_tick_fired_once(ledger: Ledger, start: datetime, end: datetime) -> None:
    runs = ledger.runs()
    window = [r for r in runs if start <= as_utc(r.tick) <= end]
    ticks = Counter(as_utc(r.tick) for r in window)
    expected = {start + timedelta(seconds=i) for i in range(TICKS)}
    where = ledger.engine.dialect.name
    assert set(ticks) == expected, f"{where}: missing {sorted(expected - set(ticks))[:5]}"
    assert max(ticks.values()) == 1
    # One job per run, none left over from a lost race (it rolled back with its run row).
    tick_jobs = ledger.tick_jobs()
    assert all(r.job_id is not None for r in runs)
    assert sorted(r.job_id for r in runs) == sorted(tick_jobs), where
    by_instance = Counter(r.executed_by for r in window)
    assert len(by_instance) >= 2, f"{where}: one instance fired every tick: {by_instance}"
    print(f"{where}: {len(window)} ticks fired by {dict(by_instance)}")


def test_a_worker_with_scheduler_fires_and_runs_the_schedule_and_counts_ticks(
    make_database_url: Callable[[str], str], processes: Processes
) -> None:
    ledger = Ledger(make_database_url("sqlite"))
    port = free_port()
    try:
        worker = processes.start(
            ledger.url, "worker", "start", "--scheduler", "--health-port", str(port)
        )

        def succeeded() -> int:
            return sum(state == "succeeded" for state in ledger.tick_jobs().values())

        wait_until(succeeded, 60, "a scheduled job run by the worker", 0.1)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        fired = re.search(rb'scheduler_ticks_fired_total\{schedule="every-second"\} (\S+)', metrics)
        assert fired is not None and float(fired.group(1)) >= 1
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.log.read_text()  # type: ignore[attr-defined]
        runs = ledger.runs()
        assert len({r.tick for r in runs}) == len(runs)
        (instance,) = {r.executed_by for r in runs}
        assert f":{worker.pid}:" in instance  # the worker's id is recorded as executed_by
    finally:
        ledger.engine.dispose()
