"""Small test helpers: waiting on conditions with a deadline, running a worker in a thread,
running a short Python script in a process of its own."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ledgerq import LedgerQ
from ledgerq.runtime.worker import Worker

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_script(script: str, timeout: float = 60) -> str:
    """Run ``script`` with this interpreter from the repository's root; return its standard
    output, failing the test (with its standard error) if it exits non-zero."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 20.0,
    what: str = "condition",
    interval: float = 0.02,
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s (last value {value!r})")
        time.sleep(interval)


@contextmanager
def running_worker(app: LedgerQ, **options: Any) -> Iterator[Worker]:
    """Run a worker of ``app`` in a background thread for the duration of the block."""
    worker = app.worker(**options)
    thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.request_stop(immediate=True)
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


def enqueue_in_a_script(
    database_url: str, redis_url: str, *, namespace: str, redis_push: str, before: str = ""
) -> int:
    """Enqueue one job from a Python process of its own that exits right after (no
    ``close()``); ``before``: lines run first, with ``app`` defined. Returns the job's id."""
    script = (
        "from ledgerq import LedgerQ\n"
        f"app = LedgerQ(database_url={database_url!r}, redis_url={redis_url!r},"
        f" namespace={namespace!r}, redis_push={redis_push!r})\n"
        "@app.task(name='work')\n"
        "def work(ctx, n): pass\n"
        f"{before}"
        "print(work.enqueue(7).job_id)\n"
    )
    return int(run_script(script).strip())
