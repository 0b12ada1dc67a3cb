"""Rendering the fleet for people (rich tables) and machines (JSON-ready dicts), and the
health verdict ``worker health`` exits on."""

from __future__ import annotations

from typing import Any

from rich.markup import escape
from rich.table import Table

from ledgerq.core import fleet


def worker_dict(w: fleet.WorkerRecord) -> dict[str, Any]:
    """A registered worker as plain JSON-ready data."""
    return {
        "worker_id": w.worker_id,
        "hostname": w.hostname,
        "pid": w.pid,
        "queues": list(w.queues),
        "concurrency": w.concurrency,
        "version": w.version,
        "state": w.state.value,
        "started_at": w.started_at.isoformat(),
        "heartbeat_at": w.heartbeat_at.isoformat(),
        "heartbeat_age_seconds": round(w.heartbeat_age_seconds, 3),
        "stopped_at": w.stopped_at.isoformat() if w.stopped_at else None,
        "stop_requested": w.stop_requested.value if w.stop_requested else None,
        "jobs_in_flight": w.jobs_in_flight,
        "jobs_processed": w.jobs_processed,
        "last_fetch_age_seconds": (
            round(w.last_fetch_age_seconds, 3) if w.last_fetch_age_seconds is not None else None
        ),
    }


def workers_table(workers: list[fleet.WorkerRecord]) -> Table:
    """One row per worker."""
    table = Table(title="workers")
    # The id is what a person copies into ``worker stop``: never folded; queues wrap at commas.
    table.add_column("worker", no_wrap=True)
    for column in ("state", "queues", "heartbeat", "in flight", "done", "stop"):
        table.add_column(column, overflow="fold")
    for w in workers:
        table.add_row(
            w.worker_id,
            w.state.value,
            ", ".join(w.queues),
            f"{w.heartbeat_age_seconds:.1f} s ago",
            str(w.jobs_in_flight),
            str(w.jobs_processed),
            w.stop_requested.value if w.stop_requested else "",
        )
    return table


def health_dict(record: fleet.HealthRecord | None) -> dict[str, Any] | None:
    """A stored health check as plain data."""
    if record is None:
        return None
    c = record.check
    return {
        "healthy": c.healthy,
        "problems": list(c.problems),
        "checked_at": record.checked_at.isoformat(),
        "age_seconds": round(record.age_seconds, 3),
        "db_latency_ms": c.db_latency_ms,
        "transport_latency_ms": c.transport_latency_ms,
        "memory_mb": c.memory_mb,
        "cpu_percent": c.cpu_percent,
        "jobs_in_flight": c.jobs_in_flight,
        "last_fetch_age_seconds": c.last_fetch_age_seconds,
    }


def verdict(
    worker: fleet.WorkerRecord,
    record: fleet.HealthRecord | None,
    *,
    ttl_seconds: float,
    health_interval_seconds: float,
) -> list[str]:
    """Why ``worker`` is unhealthy (empty when healthy): not active, heartbeat older than the
    TTL, or its newest health check reported problems or is overdue."""
    if worker.state is not fleet.WorkerState.ACTIVE:
        return [f"worker is {worker.state.value}"]
    problems = []
    if worker.heartbeat_age_seconds > ttl_seconds:
        problems.append(f"no heartbeat for {worker.heartbeat_age_seconds:.1f} s")
    if record is not None:
        problems.extend(record.check.problems)
        if record.age_seconds > 2 * health_interval_seconds + ttl_seconds:
            problems.append(f"last health check {record.age_seconds:.0f} s ago")
    return problems


def failover_dict(event: dict[str, Any]) -> dict[str, Any]:
    """A failover event (``list_failover_events``) as JSON-ready data."""
    shown = dict(event)
    for key in ("detected_at", "last_heartbeat_at"):
        value = shown.get(key)
        shown[key] = value.isoformat() if value is not None else None
    shown["duration_ms"] = round(float(shown["duration_ms"]), 2)
    return shown


def failovers_table(events: list[dict[str, Any]]) -> Table:
    """One row per failover event, newest first."""
    table = Table(title="failover events")
    for column in ("at", "dead worker", "detected by", "requeued", "buried", "took"):
        table.add_column(column, overflow="fold")
    for e in events:
        table.add_row(
            e["detected_at"].isoformat(timespec="seconds"),
            escape(str(e["worker_id"])),
            escape(str(e["detected_by"])),
            str(e["jobs_requeued"]),
            str(e["jobs_dead"]),
            f"{float(e['duration_ms']):.1f} ms",
        )
    return table
