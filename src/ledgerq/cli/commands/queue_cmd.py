"""``ledgerq queue stats|pause|resume|requeue-failed``."""

from __future__ import annotations

from datetime import datetime

import click
from rich.markup import escape
from rich.table import Table

from ledgerq.app import operations_surface
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.lazy import LazyGroup
from ledgerq.cli.output import counts_table, lifetime_table
from ledgerq.core import lifetime
from ledgerq.core.requeue import DeadJobFilter, parse_since

_CHECKS = "ledgerq.cli.commands.fleet_checks_cmd:"
_LOCKS = "ledgerq.cli.commands.locks_cmd:"
_LIMITS = "ledgerq.cli.commands.limits_cmd:"


@click.group(
    "queue",
    cls=LazyGroup,
    lazy_commands={
        "cleanup-health-checks": _CHECKS + "cleanup_health_checks",
        "cleanup-failover-events": _CHECKS + "cleanup_failover_events",
        "cleanup-orphaned-assignments": _CHECKS + "cleanup_orphaned_assignments",
        "list-locks": _LOCKS + "list_locks",
        "clear-stale-locks": _LOCKS + "clear_stale_locks",
        "breakers": _LIMITS + "breakers",
        "reset-breaker": _LIMITS + "reset_breaker",
    },
)
def group() -> None:
    """Inspect, pause and resume queues."""


@group.command("stats")
@pass_cli
def stats(cli: CliContext) -> int:
    """Jobs per queue and state now, and per queue and task since the beginning
    (``lifetime``: enqueued, succeeded, dead, cancelled, expired; jobs the retention
    deleted still count). Read from ``DATABASE_READ_URL`` when it is set."""
    store = cli.app().parts.read_store
    counts = store.count_jobs()
    waiting = store.count_waiting_to_start()
    totals = store.count_lifetime()
    if cli.as_json:
        out: dict[str, dict[str, object]] = {}
        for (queue, state), n in counts.items():
            out.setdefault(queue, {})[state.value] = n
        for queue, n in waiting.items():
            # ``running`` counts every claimed job; ``claimed`` those not started yet.
            out.setdefault(queue, {})["claimed"] = n
        for queue, figures in lifetime.documents(totals).items():
            out.setdefault(queue, {})["lifetime"] = figures
        cli.emit_json(out)
    else:
        cli.console.print(counts_table(counts, waiting))
        cli.console.print(lifetime_table(totals))
    return 0


@group.command("pause")
@click.argument("name")
@pass_cli
def pause(cli: CliContext, name: str) -> int:
    """Stop workers from claiming jobs of queue NAME (enqueues still succeed)."""
    operations_surface.queue_controls(cli.app().parts).pause_queue(name)
    click.echo(f"queue {name} paused")
    return 0


@group.command("resume")
@click.argument("name")
@pass_cli
def resume(cli: CliContext, name: str) -> int:
    """Let workers claim jobs of queue NAME again."""
    operations_surface.queue_controls(cli.app().parts).resume_queue(name)
    click.echo(f"queue {name} resumed")
    return 0


def _since(_ctx: click.Context, _param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return parse_since(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@group.command("requeue-failed")
@click.option("--queue", help="Only dead jobs of this queue.")
@click.option("--task", help="Only dead jobs of this task.")
@click.option(
    "--since",
    callback=_since,
    help="Only jobs that died since then: a duration back from now (90s, 15m, 2h, 7d, 1w) or"
    " an ISO-8601 time (naive: UTC).",
)
@click.option("--dry-run", is_flag=True, help="Count the jobs that would move; move none.")
@pass_cli
def requeue_failed(
    cli: CliContext, queue: str | None, task: str | None, since: datetime | None, dry_run: bool
) -> int:
    """Run dead jobs again now, in bulk, as ``job retry`` does one (one more run each). Only
    jobs still dead when the update reaches them move; the counts are per queue and task.
    Workflow steps are left to ``workflow retry``."""
    which = DeadJobFilter(queue=queue, task=task, died_since=since)
    report = cli.app().client.retry_dead(which, dry_run=dry_run)
    if cli.as_json:
        cli.emit_json(report.as_dict())
        return 0
    verb = "would requeue" if dry_run else "requeued"
    if report.counts:
        table = Table("queue", "task", "jobs", title=f"dead jobs {verb}")
        for (q, t), n in sorted(report.counts.items()):
            table.add_row(escape(q), escape(t), str(n))
        cli.console.print(table)
    cli.console.print(f"{verb} {report.total} dead job(s)")
    return 0
