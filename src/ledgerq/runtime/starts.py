"""StartMarks: writes when the bodies of running jobs started, so the ledger tells a job a
worker holds in its prefetch (``started_at`` NULL) from one that runs.

A start is not written on the job's way into its slot: most jobs end within milliseconds,
and their outcome's write records their start (now less how long they ran) at no extra cost.
Every ``INTERVAL_SECONDS`` the jobs whose body has run at least ``MIN_RUN_SECONDS`` and that
have not ended get their start written in one fenced statement. So ``started_at`` of a
running job appears within about a quarter second of the start.
"""

from __future__ import annotations

import collections
import threading
import time

import structlog

from ledgerq.core import errors
from ledgerq.core.ports import JobStore
from ledgerq.runtime.context import JobContext

log = structlog.get_logger("ledgerq.starts")

INTERVAL_SECONDS = 0.1
MIN_RUN_SECONDS = 0.1


class StartMarks:
    """Collects started jobs from the slots; writes the starts of those still running."""

    def __init__(self, store: JobStore) -> None:
        self._store = store
        self._started: collections.deque[JobContext] = collections.deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledgerq-starts", daemon=True)

    def start(self) -> None:
        """Start the writer thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop writing."""
        self._stop.set()
        self._thread.join(5)

    def started(self, ctx: JobContext) -> None:
        """A slot started ``ctx``'s body (called on the slot's thread; cheap)."""
        self._started.append(ctx)

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL_SECONDS):
            self.write_due()

    def write_due(self) -> int:
        """Write the starts of the jobs running for at least ``MIN_RUN_SECONDS``; return how
        many were written."""
        now = time.monotonic()
        due: list[JobContext] = []
        young: list[JobContext] = []
        for _ in range(len(self._started)):
            ctx = self._started.popleft()
            if ctx.completing or not ctx.owns_job or ctx.started_mono is None:
                continue  # its outcome records the start, or it is no longer ours
            (due if now - ctx.started_mono >= MIN_RUN_SECONDS else young).append(ctx)
        self._started.extendleft(reversed(young))
        if not due:
            return 0
        starts = [(ctx.claim, time.monotonic() - (ctx.started_mono or now)) for ctx in due]
        try:
            return sum(self._store.mark_started(starts))
        except errors.StoreError as exc:
            # Not retried: the outcome's write records the start all the same.
            log.warning("could not record job starts", error=str(exc), jobs=len(due))
            return 0
