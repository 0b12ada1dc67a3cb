"""StartMarks: writes when the bodies of running jobs started, so the ledger tells a job a
worker holds in its prefetch (``started_at`` NULL) from one that runs.

A start is not written on the job's way into its slot: most jobs end within milliseconds,
and their outcome's write records their start (now less how long they ran) at no extra cost.
Every ``INTERVAL_SECONDS`` this looks over the jobs the worker holds (a few dozen, whatever
the throughput: no per-job bookkeeping on the hot path) and writes, in one fenced statement,
the starts of those whose body has run at least ``MIN_RUN_SECONDS`` and has not ended. So
``started_at`` of a running job appears within about a quarter second of the start.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.starts")

INTERVAL_SECONDS = 0.1
MIN_RUN_SECONDS = 0.1


class StartMarks(PeriodicService):
    """Writes the starts of the held jobs whose bodies run, once each."""

    thread_name = "ledgerq-starts"
    logger = log
    failure_message = "could not record job starts"

    def __init__(self, store: JobStore, held_jobs: Callable[[], list[JobContext]]) -> None:
        super().__init__(INTERVAL_SECONDS)
        self._store = store
        self._held_jobs = held_jobs

    def tick(self) -> None:
        """Write the due starts once."""
        self.write_due()

    def write_due(self) -> int:
        """Write the starts of the held jobs running for at least ``MIN_RUN_SECONDS`` whose
        start is not written yet; return how many were written."""
        now = time.monotonic()
        due = [
            ctx
            for ctx in self._held_jobs()
            if ctx.started_mono is not None
            and not ctx.start_written
            and not ctx.completing
            and ctx.owns_job
            and now - ctx.started_mono >= MIN_RUN_SECONDS
        ]
        if not due:
            return 0
        sent = time.monotonic()
        starts = [(ctx.claim, sent - (ctx.started_mono or sent)) for ctx in due]
        try:
            written = self._store.mark_started(starts)
        except errors.StoreError as exc:
            # Tried again next time; the outcome's write records the start in any case.
            log.warning("could not record job starts", error=str(exc), jobs=len(due))
            return 0
        for ctx in due:
            ctx.start_written = True  # written, or refused (then the job is no longer ours)
        return sum(written)
