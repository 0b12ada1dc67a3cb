"""The benchmark's jobs: ``noop``, ``sleep`` (10 ms of blocking I/O) and ``lat``; each ends with
the harness's ``mark()``, the Redis bookkeeping every peer's jobs also pay.

``app`` is what the bench's workers load (``--app ledgerq.benchmark.bench_tasks:app``); its database
comes from ``LEDGERQ_DATABASE_URL``. ``harness`` is the peers' harness.py, found on
``PYTHONPATH`` (the scratch copy of the peers' folder), and imported on the first job only.
"""

from __future__ import annotations

import functools
import importlib
import time
from types import ModuleType

from ledgerq.app.application import LedgerQ
from ledgerq.runtime.context import JobContext

#: Queue every benchmark job goes to and every benchmark worker takes jobs from.
QUEUE = "bench"
#: How long a ``sleep`` job blocks, in seconds (the harness's SLEEP_S).
SLEEP_SECONDS = 0.010


@functools.cache
def harness() -> ModuleType:
    """The peers' harness module (bookkeeping: ``mark``, ``mark_lat``, pacing)."""
    return importlib.import_module("harness")


def noop(ctx: JobContext) -> None:
    """Do nothing but count the completion."""
    harness().mark()


def sleep10(ctx: JobContext) -> None:
    """Block for 10 ms (a stand-in for I/O), then count the completion."""
    time.sleep(SLEEP_SECONDS)
    harness().mark()


def lat(ctx: JobContext, enqueued_at: float) -> None:
    """Record start latency: now minus ``enqueued_at`` (wall clock, seconds), then count."""
    harness().mark_lat(enqueued_at)


app = LedgerQ()
noop_task = app.task(name="bench.noop", queue=QUEUE, max_attempts=1)(noop)
sleep_task = app.task(name="bench.sleep", queue=QUEUE, max_attempts=1)(sleep10)
lat_task = app.task(name="bench.lat", queue=QUEUE, max_attempts=1)(lat)
