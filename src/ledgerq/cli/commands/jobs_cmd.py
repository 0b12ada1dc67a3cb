"""``ledgerq job enqueue|show|list|retry|cancel|start``."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.markup import escape

from ledgerq.cli import batch_output
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.output import job_dict, job_lines, jobs_table
from ledgerq.core import errors
from ledgerq.core.job import check_run_at
from ledgerq.core.states import JobState
from ledgerq.producer.job_handle import SpooledHandle


@click.group("job")
def group() -> None:
    """Enqueue and inspect jobs."""


def parse_args_option(text: str) -> tuple[list[Any], dict[str, Any]]:
    """``--args`` as (positional, keyword) arguments; ``PayloadError`` if it is not a JSON
    list or object."""
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise errors.PayloadError(f"--args is not JSON: {exc.msg} at position {exc.pos}") from None
    except RecursionError:
        raise errors.PayloadError("--args is nested too deeply") from None
    if not isinstance(parsed, list | dict):
        raise errors.PayloadError("--args must be a JSON list (positional) or object (keyword)")
    return (parsed, {}) if isinstance(parsed, list) else ([], parsed)


def _moment(text: str | None, option: str) -> datetime | None:
    """``text`` as an aware datetime; ``InvalidSchedule`` when it is not ISO 8601 with a zone."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise errors.InvalidSchedule(f"{option} is not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise errors.InvalidSchedule(f"{option} needs a time zone (e.g. 2030-01-01T00:00:00Z)")
    return moment


@group.command("enqueue")
@click.argument("task")
@click.option(
    "--args",
    "args_text",
    default="[]",
    help="JSON list of arguments, or an object of keyword arguments.",
)
@click.option("--queue", help="Queue (default: the task's).")
@click.option("--priority", type=int, help="Lower runs first.")
@click.option("--delay", type=float, default=0.0, help="Seconds before the job may run.")
@click.option("--dedupe-key", help="At most one unfinished job holds this key.")
@click.option("--held", is_flag=True, help="Create held; start it later with `job start`.")
@click.option("--max-attempts", type=click.IntRange(min=1), help="Attempts before dead.")
@click.option("--timeout", type=float, help="Seconds an attempt may run.")
@click.option("--run-at", help="ISO time with a zone to run at (instead of --delay).")
@click.option("--dedupe-for", type=float, help="Keep --dedupe-key taken this many seconds.")
@click.option("--expires-at", help="ISO time with a zone: deleted if not started by then.")
@pass_cli
def enqueue(
    cli: CliContext,
    /,
    task: str,
    args_text: str,
    dedupe_key: str | None,
    **options: Any,
) -> int:
    """Enqueue one job of TASK (its arguments are checked against the task's handler)."""
    args, kwargs = parse_args_option(args_text)
    app = cli.app(tasks_needed=True)
    options["run_at"] = check_run_at(_moment(options["run_at"], "--run-at"), what="--run-at")
    options["expires_at"] = _moment(options["expires_at"], "--expires-at")
    job = app.client.build(task, args, kwargs, dedupe_key=dedupe_key, **options)
    result = app.client.enqueue([job])[0]
    if isinstance(result, SpooledHandle):  # the database is down and LEDGERQ_SPOOL is on
        if cli.as_json:
            cli.emit_json({"id": None, "duplicate": False, "status": "spooled", "key": result.key})
        else:
            cli.console.print(f"database unavailable: job spooled (key {result.key!r})")
        return 0
    if cli.as_json:
        cli.emit_json({"id": result.job_id, "duplicate": result.duplicate})
    elif result.duplicate:
        cli.console.print(
            f"duplicate of unfinished job {result.job_id} (dedupe key {dedupe_key!r})"
        )
    else:
        cli.console.print(f"enqueued job {result.job_id}")
    return 0


@group.command("show")
@click.argument("job_id", type=int)
@pass_cli
def show(cli: CliContext, job_id: int) -> int:
    """Show one job (with a progress bar of its items, if it has any)."""
    app = cli.app()
    data = job_dict(app.client.get(job_id))
    progress = app.parts.items.item_progress(job_id)
    has_items = progress.total is not None or progress.done > 0
    if cli.as_json:
        cli.emit_json({**data, "items": progress.as_dict() if has_items else None})
    else:
        lines = job_lines(data)
        width = max(len(label) for label, _ in lines)
        for label, text in lines:
            cli.console.print(f"[bold]{label:>{width}}[/]  ", escape(text), sep="", highlight=False)
        if has_items:
            cli.console.print(batch_output.item_progress(progress))
    return 0


@group.command("list")
@click.option("--state", type=click.Choice([s.value for s in JobState]))
@click.option("--queue")
@click.option("--task")
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@pass_cli
def list_jobs(
    cli: CliContext, state: str | None, queue: str | None, task: str | None, limit: int
) -> int:
    """List the newest jobs."""
    jobs = cli.app().client.list(
        state=JobState(state) if state else None, queue=queue, task=task, limit=limit
    )
    if cli.as_json:
        cli.emit_json([job_dict(j) for j in jobs])
    else:
        cli.console.print(jobs_table(jobs))
    return 0


@group.command("retry")
@click.argument("job_id", type=int)
@pass_cli
def retry(cli: CliContext, job_id: int) -> int:
    """Run a failed, dead or cancelled job again now."""
    job = cli.app().client.retry(job_id)
    _report(cli, job_id, job.state.value)
    return 0


@group.command("cancel")
@click.argument("job_id", type=int)
@pass_cli
def cancel(cli: CliContext, job_id: int) -> int:
    """Cancel a job that has not finished."""
    job = cli.app().client.cancel(job_id)
    _report(cli, job_id, job.state.value)
    return 0


@group.command("start")
@click.argument("job_id", type=int)
@pass_cli
def start(cli: CliContext, job_id: int) -> int:
    """Start a held job: it is queued now."""
    job = cli.app().client.start(job_id)
    _report(cli, job_id, job.state.value)
    return 0


def _report(cli: CliContext, job_id: int, state: str) -> None:
    if cli.as_json:
        cli.emit_json({"id": job_id, "state": state})
    else:
        cli.console.print(f"job {job_id} is now {state}")
