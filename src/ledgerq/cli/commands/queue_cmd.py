"""``ledgerq queue stats|pause|resume``."""

from __future__ import annotations

import click

from ledgerq.app import operations_surface
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.lazy import LazyGroup
from ledgerq.cli.output import counts_table, lifetime_table
from ledgerq.core import lifetime

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
    deleted still count)."""
    store = cli.app().client.store
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
