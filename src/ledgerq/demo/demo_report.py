"""The demo's summary, computed from the ledger's rows (never from the workers' own stats):
jobs per state and per task, throughput, and start and run latency percentiles. As JSON-ready
data, and as rich tables for people."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from ledgerq.core.job import Job
from ledgerq.core.states import FINISHED, JobState

#: Percentiles reported for each latency.
PERCENTILES = (50, 90, 99)


def percentiles_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """Nearest-rank p50/p90/p99 of ``seconds``, in milliseconds (None when empty)."""
    ordered = sorted(seconds)
    result: dict[str, float | None] = {}
    for q in PERCENTILES:
        if not ordered:
            result[f"p{q}"] = None
            continue
        rank = max(math.ceil(q / 100 * len(ordered)), 1)
        result[f"p{q}"] = round(ordered[rank - 1] * 1000, 1)
    return result


def task_summary(jobs: Sequence[Job]) -> dict[str, Any]:
    """Counts and attempts of one task's jobs."""
    states = Counter(j.state for j in jobs)
    attempts = [j.attempt for j in jobs]
    return {
        "jobs": len(jobs),
        "succeeded": states[JobState.SUCCEEDED],
        "dead": states[JobState.DEAD],
        "unfinished": sum(n for s, n in states.items() if s not in FINISHED),
        "mean_attempts": round(sum(attempts) / len(attempts), 3),
        "min_attempts": min(attempts),
        "max_attempts": max(attempts),
        "attempts_allowed": max(j.max_attempts for j in jobs),
    }


def latencies(jobs: Iterable[Job]) -> dict[str, dict[str, float | None]]:
    """Percentiles of start latency (``started_at - run_at``: how long a due job waited for a
    worker) and of run duration (``finished_at - started_at``) of the succeeded jobs."""
    waits: list[float] = []
    runs: list[float] = []
    for job in jobs:
        if job.state is not JobState.SUCCEEDED or job.started_at is None:
            continue
        waits.append(max((job.started_at - job.run_at).total_seconds(), 0.0))
        if job.finished_at is not None:
            runs.append(max((job.finished_at - job.started_at).total_seconds(), 0.0))
    return {"start": percentiles_ms(waits), "run": percentiles_ms(runs)}


def summarize(jobs: Sequence[Job], workers_started_at: datetime) -> dict[str, Any]:
    """The summary of a demo run whose workers started at ``workers_started_at`` (aware UTC).

    Throughput is finished jobs per second of wall clock from the workers' start to the last
    finish recorded in the ledger."""
    states = Counter(j.state for j in jobs)
    by_task: dict[str, list[Job]] = {}
    for job in jobs:
        by_task.setdefault(job.task, []).append(job)
    finished = [j.finished_at for j in jobs if j.state in FINISHED and j.finished_at]
    span = (max(finished) - workers_started_at).total_seconds() if finished else 0.0
    return {
        "jobs": len(jobs),
        "states": {s.value: states[s] for s in JobState},
        "tasks": {name: task_summary(group) for name, group in sorted(by_task.items())},
        "workers_seconds": round(span, 3),
        "throughput_jobs_per_second": round(len(finished) / span, 1) if span > 0 else None,
        "latency_ms": latencies(jobs),
    }


def _states_table(states: Mapping[str, int], total: int) -> Table:
    table = Table(title="jobs per state")
    table.add_column("state")
    table.add_column("jobs", justify="right")
    table.add_column("share", justify="right")
    for state, count in states.items():
        if count or state in (JobState.SUCCEEDED, JobState.DEAD):
            table.add_row(state, f"{count:,}", f"{100 * count / max(total, 1):.1f} %")
    return table


def _tasks_table(tasks: Mapping[str, Mapping[str, Any]]) -> Table:
    table = Table(title="jobs per task")
    for column in ("task", "jobs", "succeeded", "dead", "mean attempts", "attempts allowed"):
        table.add_column(column, justify="left" if column == "task" else "right")
    for name, t in tasks.items():
        table.add_row(
            name,
            f"{t['jobs']:,}",
            f"{t['succeeded']:,}",
            f"{t['dead']:,}",
            f"{t['mean_attempts']:.2f}",
            str(t["attempts_allowed"]),
        )
    return table


def _latency_table(latency: Mapping[str, Mapping[str, float | None]]) -> Table:
    table = Table(title="latency of succeeded jobs (ms)")
    table.add_column("")
    for q in PERCENTILES:
        table.add_column(f"p{q}", justify="right")
    names = {"start": "start (run_at to started_at)", "run": "run (started_at to finished_at)"}
    for key, label in names.items():
        values = latency[key]
        table.add_row(label, *(_ms(values[f"p{q}"]) for q in PERCENTILES))
    return table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render(summary: Mapping[str, Any], console: Console) -> None:
    """Print the summary as tables and one throughput line."""
    console.print(_states_table(summary["states"], summary["jobs"]))
    console.print(_tasks_table(summary["tasks"]))
    console.print(_latency_table(summary["latency_ms"]))
    rate = summary["throughput_jobs_per_second"]
    console.print(
        f"{summary['jobs']:,} jobs, {summary['processes']} worker processes x "
        f"{summary['concurrency']} slots: {summary['workers_seconds']:.1f} s from the workers' "
        f"start to the last finish, {rate or 0:,.0f} jobs/s",
        highlight=False,
    )
