"""Lifeline: every worker checks, every failover interval, for workers whose heartbeat is
older than the TTL and fails them over (their running jobs back to ``queued`` through fenced
writes). Many workers may run it at once: the store moves each dead worker's jobs once.

A worker that could not reach the database itself within the last TTL does not judge others:
after a database outage longer than the TTL every heartbeat looks stale, and the first worker
back would otherwise fail over the whole fleet before the others had a chance to beat."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from ledgerq.core.ports import WorkerStore
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.lifeline")


class Lifeline(PeriodicService):
    """Runs ``WorkerStore.fail_over_workers`` every ``interval_seconds`` on its own thread."""

    thread_name = "ledgerq-lifeline"
    logger = log
    failure_message = "failover check failed"
    join_seconds: float | None = None

    def __init__(
        self,
        store: WorkerStore,
        worker_id: str,
        *,
        ttl_seconds: float,
        interval_seconds: float,
        seconds_since_outage: Callable[[], float] = lambda: float("inf"),
        on_requeued: Callable[[list[int]], None] = lambda _ids: None,
    ) -> None:
        """``seconds_since_outage`` tells how long ago this worker last failed to reach the
        database; within one TTL of that the lifeline holds back. Stopping does not wait: a
        failover in progress finishes its transaction."""
        super().__init__(interval_seconds)
        self._store = store
        self._since_outage = seconds_since_outage
        self._on_requeued = on_requeued
        self._worker_id = worker_id
        self._ttl = ttl_seconds

    def tick(self) -> None:
        """One failover round."""
        self.check()

    def check(self) -> int:
        """One failover round; return how many workers were failed over."""
        if self._since_outage() < self._ttl:
            return 0  # just back from an outage: the others may not have beaten yet
        events = self._store.fail_over_workers(
            ttl_seconds=self._ttl, detected_by=f"worker {self._worker_id}"
        )
        for event in events:
            log.warning(
                "worker failed over",
                dead_worker=event.worker_id,
                requeued=len(event.requeued),
                dead_jobs=len(event.dead),
                took_ms=round(event.duration_ms, 1),
            )
        requeued = [job_id for event in events for job_id in event.requeued]
        if requeued:
            # With Redis, workers wait for ids: announce the jobs, or they wait for the
            # reconciler's REQUEUE_AFTER while every worker is busy.
            self._on_requeued(requeued)
        return len(events)
