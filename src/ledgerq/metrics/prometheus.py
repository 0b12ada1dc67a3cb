"""PrometheusSink (counters and histograms fed by runtime events) and LedgerCollector (gauges
read from the ledger at scrape time), under the names of SPEC section 8.

Several processes: when ``PROMETHEUS_MULTIPROC_DIR`` is set, event metrics are written to that
directory by every process and summed by ``MultiProcessCollector`` at scrape time; the gauges
read from the database are collected once, by the scraped process, so they never double.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ledgerq.core.limits import Circuit
from ledgerq.core.operations import (
    CompletionBacklog,
    Event,
    HealthChecked,
    HintsDropped,
    JobFinished,
    JobsEnqueued,
    PoolUse,
    ReconcilePassed,
    StoreWriteFailed,
    UnknownTaskSeen,
    WorkerView,
)
from ledgerq.metrics.breakers import BreakerCollector
from ledgerq.metrics.coordination import CoordinationCollector
from ledgerq.metrics.pool import PoolCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


def multiprocess_dir() -> str | None:
    """The multiprocess directory, if prometheus_client's multiprocess mode is on."""
    return os.environ.get(MULTIPROC_ENV) or None


class PrometheusSink:
    """An EventSink that counts enqueued and processed jobs and times attempts."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        """``registry`` None means multiprocess mode (values go to the shared directory)."""
        self.enqueued = Counter(
            "jobs_enqueued", "Jobs accepted into the ledger.", ["queue"], registry=registry
        )
        self.processed = Counter(
            "jobs_processed",
            "Attempts whose outcome was written, by outcome (the job's new state).",
            ["queue", "task", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "job_duration_seconds",
            "Seconds the body of one attempt ran (from its start, not its claim).",
            ["queue", "task"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.health_checks = Counter(
            "worker_health_checks",
            "Health checks a worker's registrar ran and recorded, by status (ok or failed).",
            ["status"],
            registry=registry,
        )
        self.health_checks_failed = Counter(
            "worker_health_checks_failed",
            "Health checks that found a problem (database, not consuming) or were not recorded.",
            registry=registry,
        )
        self.reconciled = Counter(
            "reconciler_actions",
            "What reconciler passes did: jobs put back, staged, announced, deleted.",
            ["action"],
            registry=registry,
        )
        self.hints_dropped = Counter(
            "transport_hints_dropped",
            "Job ids from Redis whose claim failed (taken, finished, unknown, malformed).",
            registry=registry,
        )
        self.ticks_fired = Counter(
            "scheduler_ticks_fired",
            "Schedule ticks this process fired (each tick is fired by one instance only).",
            ["schedule"],
            registry=registry,
        )

        self.write_failures = Counter(
            "store_write_failures",
            "Writes a worker must make that failed and are retried, by operation.",
            ["operation"],
            registry=registry,
        )
        self.unknown_task = Counter(
            "jobs_unknown_task",
            "Claimed jobs of a task the worker does not register, by outcome (deferred: put"
            " back without spending an attempt; buried: no live worker declared the task).",
            ["queue", "task", "outcome"],
            registry=registry,
        )
        self.completions_pending = Gauge(
            "completions_pending",
            "Finished attempts whose outcome a worker holding its claims back has not written.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.completions_oldest = Gauge(
            "completions_oldest_pending_seconds",
            "Age of the oldest unwritten outcome while a worker holds its claims back.",
            registry=registry,
            multiprocess_mode="livemax",
        )

    def emit(self, event: Event) -> None:
        """Record one event; cheap, never raises."""
        if isinstance(event, JobFinished):  # the hot path first
            self.processed.labels(event.queue, event.task, event.outcome).inc()
            self.duration.labels(event.queue, event.task).observe(event.duration_seconds)
        elif isinstance(event, JobsEnqueued):
            self.enqueued.labels(event.queue).inc(event.count)
        else:
            self._record_rare(event)

    def _record_rare(self, event: Event) -> None:
        """The events that come seldom (passes, checks, failures)."""
        if isinstance(event, HealthChecked):
            self.record_health_check(event.ok)
        elif isinstance(event, ReconcilePassed):
            for action, count in event.actions:
                if count:
                    self.reconciled.labels(action).inc(count)
        elif isinstance(event, HintsDropped):
            self.hints_dropped.inc(event.count)
        elif isinstance(event, StoreWriteFailed):
            self.write_failures.labels(event.operation).inc()
        elif isinstance(event, UnknownTaskSeen):
            self.unknown_task.labels(event.queue, event.task, event.outcome).inc()
        elif isinstance(event, CompletionBacklog):
            self.completions_pending.set(event.pending)
            self.completions_oldest.set(event.oldest_seconds)

    def count_tick(self, schedule: str) -> None:
        """Count one tick of ``schedule`` fired by this process."""
        self.ticks_fired.labels(schedule).inc()

    def record_health_check(self, ok: bool) -> None:
        """Count one health check of this worker (its registrar's, see ``HealthChecked``)."""
        self.health_checks.labels("ok" if ok else "failed").inc()
        if not ok:
            self.health_checks_failed.inc()


@dataclass(frozen=True, slots=True)
class LedgerReadings:
    """What the ledger collector reads at scrape time (callables, so each scrape is fresh)."""

    queue_lengths: Callable[[], Mapping[str, int]]
    queue_latency: Callable[[], Mapping[str, float]]
    workers: Callable[[], Sequence[WorkerView]]
    transport_fallback: Callable[[], bool] = lambda: False
    failover_events: Callable[[], int] = lambda: 0
    locks_held: Callable[[], int] | None = None


class LedgerCollector(Collector):
    """Gauges read from the database at scrape time: queue length and latency, active
    workers, transport fallback, failover events (the pool's: ``metrics/pool.py``)."""

    def __init__(self, readings: LedgerReadings) -> None:
        self._readings = readings

    def collect(self) -> Iterable[Metric]:
        """One reading of every gauge."""
        r = self._readings
        length = GaugeMetricFamily(
            "queue_length", "Jobs waiting in state queued.", labels=["queue_name"]
        )
        for queue, n in sorted(r.queue_lengths().items()):
            length.add_metric([queue], n)
        latency = GaugeMetricFamily(
            "queue_latency_seconds",
            "Age of the oldest due queued job.",
            labels=["queue_name"],
        )
        for queue, seconds in sorted(r.queue_latency().items()):
            latency.add_metric([queue], seconds)
        yield length
        yield latency
        yield GaugeMetricFamily("workers_active", "Workers known alive.", len(r.workers()))
        yield GaugeMetricFamily(
            "transport_fallback_active",
            "1 while the Redis transport is down and workers poll the database.",
            1 if r.transport_fallback() else 0,
        )
        yield CounterMetricFamily(
            "failover_events", "Failover events recorded in the ledger.", r.failover_events()
        )
        if r.locks_held is not None:
            held = r.locks_held()
            yield GaugeMetricFamily(
                "distributed_locks_held", "Distributed locks with an unexpired lease.", held
            )


class CpuCollector(Collector):
    """``worker_cpu_usage_percent``: this process's CPU time over wall time since the previous
    scrape (100 = one core busy)."""

    def __init__(self) -> None:
        self._last = (time.monotonic(), time.process_time())

    def collect(self) -> Iterable[Metric]:
        """One reading, relative to the previous one."""
        now, cpu = time.monotonic(), time.process_time()
        wall = now - self._last[0]
        percent = 100.0 * (cpu - self._last[1]) / wall if wall > 0 else 0.0
        self._last = (now, cpu)
        yield GaugeMetricFamily(
            "worker_cpu_usage_percent",
            "CPU use of this worker process since the last scrape.",
            round(percent, 2),
        )


class TransportCollector(Collector):
    """``transport_fallback_active`` of one worker: 1 while it polls because Redis failed."""

    def __init__(self, fallback_active: Callable[[], bool]) -> None:
        self._fallback_active = fallback_active

    def collect(self) -> Iterable[Metric]:
        """One reading."""
        yield GaugeMetricFamily(
            "transport_fallback_active",
            "1 while the Redis transport is down and this worker polls the database.",
            1 if self._fallback_active() else 0,
        )


class MetricsHub:
    """The process's metrics: the event sink, an optional ledger collector, and rendering."""

    def __init__(self) -> None:
        self._dir = multiprocess_dir()
        self._own = CollectorRegistry() if self._dir is None else None
        self.sink = PrometheusSink(self._own)
        self._ledger: LedgerCollector | None = None
        self._cpu: CpuCollector | None = None
        self._transport: TransportCollector | None = None
        self._breakers: Collector | None = None
        self._coordination: Collector | None = None
        self._pool: Collector | None = None

    def read_ledger(self, readings: LedgerReadings) -> None:
        """Also expose the ledger's gauges (only in one process per scrape target)."""
        self._ledger = LedgerCollector(readings)

    def watch_cpu(self) -> None:
        """Also expose this process's CPU use (a worker's own endpoint)."""
        self._cpu = CpuCollector()

    def watch_transport(self, fallback_active: Callable[[], bool]) -> None:
        """Also expose ``transport_fallback_active`` of this worker's transport."""
        self._transport = TransportCollector(fallback_active)

    def watch_pool(self, read: Callable[[], PoolUse]) -> None:
        """Also expose this process's connection pool (see metrics/pool.py)."""
        self._pool = PoolCollector(read)

    def watch_breakers(self, list_breakers: Callable[[], Iterable[Circuit]]) -> None:
        """Also expose ``circuit_breaker_state{name}`` (see metrics/breakers.py)."""
        self._breakers = BreakerCollector(list_breakers)

    def watch_coordination(
        self, workflow_states: Callable[[], Mapping[str, int]], open_batches: Callable[[], int]
    ) -> None:
        """Also expose ``workflows{state}`` and ``batches_open`` (see metrics/coordination.py)."""
        self._coordination = CoordinationCollector(workflow_states, open_batches)

    def render(self) -> tuple[bytes, str]:
        """The exposition text of every metric, and its content type."""
        registry = CollectorRegistry()
        if self._dir is not None:
            multiprocess.MultiProcessCollector(registry, path=self._dir)  # type: ignore[no-untyped-call]
        elif self._own is not None:
            registry.register(_Forward(self._own))
        extras = (
            self._ledger,
            self._pool,
            self._cpu,
            self._transport,
            self._breakers,
            self._coordination,
        )
        for extra in extras:
            if extra is not None:
                registry.register(extra)
        return generate_latest(registry), CONTENT_TYPE_LATEST


class _Forward(Collector):
    """Exposes another registry's metrics inside a per-scrape registry."""

    def __init__(self, source: CollectorRegistry) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        return self._source.collect()


def mark_process_dead(pid: int) -> None:
    """Drop a finished process's live gauges from the multiprocess directory (call from a
    worker manager when a child exits)."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
