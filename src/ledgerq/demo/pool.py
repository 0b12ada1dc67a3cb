"""WorkerPool: the demo's worker processes (``ledgerq worker start --burst``) and their shared
log file. Stopping sends SIGTERM (a graceful stop that puts unfinished jobs back), and
SIGKILL only to a process that outlives the grace period."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ledgerq.demo import demo_tasks

#: The application the worker processes load.
WORKER_APP = "ledgerq.demo.demo_tasks:app"
#: Seconds between a worker's looks for retries that came due: short, so a retry runs soon
#: after its backoff, but not so short that the looks compete with claims for SQLite's lock.
STAGE_INTERVAL_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """What every worker process of the pool gets."""

    database_url: str
    concurrency: int
    log_path: Path


class WorkerPool:
    """Spawns burst workers in rounds; every process ever spawned is stopped by ``stop``."""

    def __init__(self, spec: PoolSpec) -> None:
        self.spec = spec
        self._procs: list[subprocess.Popen[bytes]] = []
        self._round: list[subprocess.Popen[bytes]] = []

    def command(self) -> list[str]:
        """The command line of one worker process."""
        return [
            sys.executable,
            "-m",
            "ledgerq.cli.main",
            "--app",
            WORKER_APP,
            "worker",
            "start",
            "--burst",
            "--concurrency",
            str(self.spec.concurrency),
            "--queues",
            ",".join(demo_tasks.QUEUES),
            "--poll-interval",
            str(STAGE_INTERVAL_SECONDS),
        ]

    def spawn(self, processes: int) -> None:
        """Start a round of ``processes`` workers, logging to the pool's log file."""
        # The child must see the demo's ledger, whatever the caller's environment says.
        env = {**os.environ, "LEDGERQ_DATABASE_URL": self.spec.database_url}
        self._round = []
        with self.spec.log_path.open("ab") as log:
            for _ in range(processes):
                proc = subprocess.Popen(
                    self.command(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    start_new_session=True,  # Ctrl-C reaches the demo only; it stops them
                )
                self._round.append(proc)
        self._procs.extend(self._round)

    def alive(self) -> int:
        """How many processes are still running."""
        return sum(1 for p in self._procs if p.poll() is None)

    def round_exit_codes(self) -> list[int | None]:
        """Exit codes of the latest round (None: still running)."""
        return [p.poll() for p in self._round]

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every process to exit; True if all did."""
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.alive() == 0

    def stop(self, grace_seconds: float = 10.0) -> int:
        """SIGTERM every running process, SIGKILL what is left after ``grace_seconds``;
        return how many were running. A second Ctrl-C while waiting kills at once."""
        running = [p for p in self._procs if p.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        # A second Ctrl-C cuts the grace period short: kill the rest rather than orphan them.
        with contextlib.suppress(KeyboardInterrupt):
            self.wait(grace_seconds)
        for proc in running:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return len(running)
