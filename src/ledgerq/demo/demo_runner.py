"""Runs the demo end to end: a fresh SQLite ledger, the workload, rounds of burst workers
watched live, and the summary. Progress and the finish line are read from the ledger only."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from ledgerq.app.application import LedgerQ
from ledgerq.core import errors
from ledgerq.core.states import JobState
from ledgerq.demo import demo_report, demo_tasks, live, workload
from ledgerq.demo.pool import PoolSpec, WorkerPool

#: Seconds between looks at the ledger while workers run.
POLL_SECONDS = 0.25
#: The watcher waits at least this many times as long as its last count took, so that its
#: reads (which hold SQLite's write lock) take at most a tenth of the lock's time.
COUNT_BACKOFF_FACTOR = 10
#: Rounds of burst workers at most. Burst workers exit when nothing is due, which can leave
#: retries that are waiting out their backoff; a later round (one process) runs those.
MAX_ROUNDS = 5
#: Longest wait for a pending retry to come due before the next round.
MAX_RETRY_WAIT_SECONDS = 10.0
_SQLITE_HEADER = b"SQLite format 3\x00"

Outcome = Literal["finished", "stalled", "interrupted"]


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What the demo runs: ``jobs`` on ``processes`` workers of ``concurrency`` slots each,
    in the SQLite file ``database`` (replaced), logging workers to ``database`` + ``.log``."""

    jobs: int = 20_000
    processes: int = 2
    concurrency: int = 8
    database: Path = Path("ledgerq-demo.db")

    @property
    def log_path(self) -> Path:
        """Where the worker processes log."""
        return self.database.with_suffix(".log")


@dataclass(slots=True)
class DemoRun:
    """How a run ended (``detail`` says it in a sentence) and, unless interrupted, its summary."""

    outcome: Outcome
    detail: str
    summary: dict[str, Any] = field(default_factory=dict)


def reset_ledger(options: DemoOptions) -> None:
    """Delete the demo's database and log. Raises ``ConfigError`` instead of deleting a file
    that is not an SQLite database (a mistyped ``--database`` must not destroy data)."""
    path = options.database
    if path.exists():
        with path.open("rb") as f:
            header = f.read(len(_SQLITE_HEADER))
        if header and header != _SQLITE_HEADER:
            raise errors.ConfigError(f"refusing to replace {path}: it is not an SQLite database")
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), options.log_path):
        stale.unlink(missing_ok=True)


def count_states(app: LedgerQ) -> Counter[JobState]:
    """Jobs per state over every queue."""
    states: Counter[JobState] = Counter()
    for (_queue, state), n in app.client.store.count_jobs().items():
        states[state] += n
    return states


def run_demo(options: DemoOptions, console: Console, *, show_live: bool) -> DemoRun:
    """Run the whole demo; Ctrl-C stops the workers and ends it as ``interrupted``."""
    options = DemoOptions(
        options.jobs, options.processes, options.concurrency, options.database.resolve()
    )
    reset_ledger(options)
    url = f"sqlite:///{options.database}"
    app = LedgerQ(database_url=url)
    pool = WorkerPool(PoolSpec(url, options.concurrency, options.log_path))
    try:
        return _run(app, pool, options, console, show_live)
    except KeyboardInterrupt:
        stopped = pool.stop()
        done = live.finished_count(count_states(app))
        workers = (
            f"sent SIGTERM to {stopped} running worker(s), which put their unfinished jobs"
            " back to queued"
            if stopped
            else "no worker was running"
        )
        return DemoRun(
            "interrupted",
            f"interrupted: {done:,} of {options.jobs:,} jobs finished; {workers}."
            f" The ledger is kept in {options.database}",
        )
    finally:
        pool.stop()
        app.close()


def _run(
    app: LedgerQ, pool: WorkerPool, options: DemoOptions, console: Console, show_live: bool
) -> DemoRun:
    app.migrate()
    handles = demo_tasks.register(app)
    with (
        console.status("enqueueing jobs", spinner="dots") if show_live else contextlib.nullcontext()
    ):
        workload.enqueue(handles, workload.plan(options.jobs))
    started_at = datetime.now(UTC)
    clock = time.monotonic()
    with live.Board(console, options.jobs, enabled=show_live) as board:
        board.start_clock()
        outcome, detail = _supervise(app, pool, options, board)
    wall = time.monotonic() - clock
    summary = demo_report.summarize(app.client.store.list_jobs(limit=options.jobs + 1), started_at)
    summary.update(
        outcome=outcome,
        detail=detail,
        database=str(options.database),
        processes=options.processes,
        concurrency=options.concurrency,
        wall_seconds=round(wall, 3),
    )
    return DemoRun(outcome, detail, summary)


def _supervise(
    app: LedgerQ, pool: WorkerPool, options: DemoOptions, board: live.Board
) -> tuple[Outcome, str]:
    states: Counter[JobState] = Counter()
    for round_no in range(1, MAX_ROUNDS + 1):
        pool.spawn(options.processes if round_no == 1 else 1)
        note = "jobs" if round_no == 1 else f"retries (round {round_no})"
        states = _watch(app, pool, board, options.jobs, note)
        pool.wait(5.0)  # burst workers exit on their own once nothing is due
        states = count_states(app)
        board.show(states, note)
        if live.finished_count(states) >= options.jobs:
            return "finished", f"all {options.jobs:,} jobs finished"
        failed = [c for c in pool.round_exit_codes() if c not in (0, None)]
        if failed:
            return "stalled", (
                f"worker processes exited with codes {failed}; see {options.log_path}"
            )
        if states[JobState.RUNNING]:
            return "stalled", (
                f"{states[JobState.RUNNING]} jobs are still running though every worker"
                f" exited; see {options.log_path}"
            )
        _wait_for_retries(app)
    unfinished = options.jobs - live.finished_count(states)
    return "stalled", f"{unfinished:,} jobs unfinished after {MAX_ROUNDS} rounds of workers"


def _watch(
    app: LedgerQ, pool: WorkerPool, board: live.Board, total: int, note: str
) -> Counter[JobState]:
    """Redraw from the ledger until every job finished or every worker exited."""
    while True:
        alive = pool.alive()  # read before the counts, so an exit's last writes are counted
        began = time.monotonic()
        states = count_states(app)
        took = time.monotonic() - began
        board.show(states, note)
        if live.finished_count(states) >= total or not alive:
            return states
        # On SQLite every read takes the write lock; a slow count must not starve the workers.
        time.sleep(max(POLL_SECONDS, COUNT_BACKOFF_FACTOR * took))


def _wait_for_retries(app: LedgerQ) -> None:
    """Sleep until the earliest waiting job (a retry in backoff) is due."""
    store = app.client.store
    waiting = [
        job.run_at
        for state in (JobState.FAILED, JobState.SCHEDULED)
        for job in store.list_jobs(state=state, limit=10_000)
    ]
    if waiting:
        delay = (min(waiting) - datetime.now(UTC)).total_seconds()
        time.sleep(min(max(delay, 0.0), MAX_RETRY_WAIT_SECONDS))
