"""The demo's workload: how many jobs of each task, with arguments fixed by position (so a
rerun does the same work), and their bulk insert in chunks that interleave the tasks."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ledgerq.app.task import Task

#: The task that takes every job the shares below leave over.
MAIN_TASK = "send_sms"
#: Share of the other tasks. Slow reports stay near 1.5 % so that the default 20 000 jobs
#: finish in well under a minute on two cores; doomed jobs are few, as in real life.
SHARES: Mapping[str, float] = {
    "make_thumbnail": 0.06,
    "sync_inventory": 0.06,
    "render_report": 0.015,
    "call_legacy_api": 0.005,
}
#: Fewest jobs that hold one job of every task.
MIN_JOBS = len(SHARES) + 1
#: Jobs per round of ``enqueue_many`` calls (one bulk insert per task and round).
CHUNK_JOBS = 2000

Plan = dict[str, list[tuple[int, ...]]]


def plan(total: int) -> Plan:
    """The arguments of every job, by task name: each share gets at least one job and
    ``send_sms`` the rest. Raises ``ValueError`` when ``total`` is below ``MIN_JOBS``."""
    if total < MIN_JOBS:
        raise ValueError(f"the demo needs at least {MIN_JOBS} jobs, got {total}")
    counts = {name: max(1, round(total * share)) for name, share in SHARES.items()}
    counts = {MAIN_TASK: total - sum(counts.values()), **counts}
    return {name: [_arguments(name, i) for i in range(n)] for name, n in counts.items()}


def _arguments(task: str, index: int) -> tuple[int, ...]:
    if task == "render_report":
        return (index, 20 + (index * 37) % 81)  # 20 to 100 ms of blocking I/O
    if task == "sync_inventory":
        return (index, 1 + index % 2)  # fails once or twice before it succeeds
    return (index,)


def enqueue(tasks: Mapping[str, Task[..., Any]], jobs: Plan) -> int:
    """Insert every planned job; return how many were inserted.

    Each round inserts a strided slice of every task's jobs, so slow and fast kinds are
    mixed along the queue instead of one kind after the other."""
    total = sum(len(calls) for calls in jobs.values())
    rounds = max(1, math.ceil(total / CHUNK_JOBS))
    inserted = 0
    for k in range(rounds):
        for name, calls in jobs.items():
            part: Sequence[tuple[int, ...]] = calls[k::rounds]
            if part:
                inserted += len(tasks[name].enqueue_many(part))
    return inserted
