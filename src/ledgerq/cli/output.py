"""Rendering jobs and counts for people (rich) and machines (JSON-ready dicts)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from ledgerq.core import lifetime
from ledgerq.core.job import Job
from ledgerq.core.lifetime import LifetimeTotal
from ledgerq.core.redaction import mask_text, mask_value
from ledgerq.core.states import JobState


def job_dict(job: Job) -> dict[str, Any]:
    """A job as plain JSON-ready data, secrets masked as the API masks them."""
    return {
        "id": job.id,
        "task": job.task,
        "queue": job.queue,
        "state": job.state.value,
        "priority": job.priority,
        # Runs, not claims: a claim a limit postponed without running is not an attempt.
        "attempt": job.runs,
        "max_attempts": job.max_runs,
        "postponed": job.postponed,
        "args": mask_value(json.loads(job.args_json)),
        "run_at": job.run_at.isoformat(),
        "created_at": job.created_at.isoformat(),
        "claimed_at": job.claimed_at.isoformat() if job.claimed_at else None,
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "waiting_to_start": job.waiting_to_start,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "worker_id": job.worker_id,
        "dedupe_key": job.dedupe_key,
        "timeout_seconds": job.timeout_seconds,
        "expires_at": job.expires_at.isoformat() if job.expires_at else None,
        "result": mask_value(json.loads(job.result_json)) if job.result_json else None,
        "error": mask_value(json.loads(job.error_json)) if job.error_json else None,
    }


def job_lines(data: dict[str, Any]) -> list[tuple[str, str]]:
    """``job_dict`` as (label, text) lines a person reads: arguments and results as JSON, the
    error as its message with the traceback below it, real line breaks kept."""
    lines: list[tuple[str, str]] = []
    for key, value in data.items():
        if key == "error" and isinstance(value, dict):
            facts = ", ".join(
                f"{k} {v}" for k, v in value.items() if k not in ("message", "traceback")
            )
            lines.append((key, f"{value.get('message', '')} ({facts})"))
            if value.get("traceback"):
                lines.append(("traceback", "\n" + str(value["traceback"]).rstrip()))
        elif isinstance(value, dict | list):
            lines.append((key, json.dumps(value, ensure_ascii=False)))
        else:
            lines.append((key, "" if value is None else str(value)))
    return lines


def jobs_table(jobs: Iterable[Job], title: str = "jobs") -> Table:
    """A compact table of jobs, newest first."""
    table = Table(title=title)
    for column in ("id", "task", "queue", "state", "attempt", "run_at", "error"):
        table.add_column(column, overflow="fold")
    for job in jobs:
        error = mask_text(json.loads(job.error_json)["message"]) if job.error_json else ""
        cells = (
            str(job.id),
            job.task,
            job.queue,
            "claimed" if job.waiting_to_start else job.state.value,
            f"{job.runs}/{job.max_runs}",
            job.run_at.strftime("%m-%d %H:%M:%S"),
            error[:60],
        )
        table.add_row(*(escape(cell) for cell in cells))  # a message's [tags] are text
    return table


def counts_table(
    counts: dict[tuple[str, JobState], int], waiting: dict[str, int] | None = None
) -> Table:
    """Jobs per queue and state; ``running`` counts started bodies only, ``claimed`` the
    running jobs a worker holds in its prefetch (``waiting``, per queue)."""
    waiting = waiting or {}
    table = Table(title="jobs per queue and state")
    table.add_column("queue", no_wrap=True)
    # Only the states some queue has (queued and running always), so the table stays readable
    # at 80 columns; ``--json`` gives every state.
    present = {state for (_, state), count in counts.items() if count}
    always = {JobState.QUEUED, JobState.RUNNING}
    states = [state for state in JobState if state in present or state in always]
    for state in states:
        table.add_column(state.value, justify="right")
        if state is JobState.RUNNING:
            table.add_column("claimed", justify="right")
    for queue in sorted({q for q, _ in counts}):
        cells: list[str] = []
        for state in states:
            count = counts.get((queue, state), 0)
            if state is JobState.RUNNING:
                held = waiting.get(queue, 0)
                cells += [str(count - held), str(held)]
            else:
                cells.append(str(count))
        table.add_row(queue, *cells)
    return table


def lifetime_table(totals: Sequence[LifetimeTotal]) -> Table:
    """Jobs since the beginning per queue and task (retention-pruned rows included), with a
    row per queue summing its tasks when it has several."""
    table = Table(title="jobs since the beginning (survive retention)")
    table.add_column("queue")
    table.add_column("task")
    names = ("enqueued", "succeeded", "dead", "cancelled", "expired")
    for name in names:
        table.add_column(name, justify="right")
    per_queue = lifetime.by_queue(totals)
    for queue, summed in per_queue.items():
        tasks = [t for t in totals if t.queue == queue]
        rows = [*tasks, summed] if len(tasks) > 1 else tasks
        for total in rows:
            figures = total.figures()
            table.add_row(escape(queue), escape(total.task), *(str(figures[n]) for n in names))
    return table
