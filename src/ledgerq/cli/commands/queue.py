"""``ledgerq queue stats|pause|resume``."""

from __future__ import annotations

import click

from ledgerq import operations
from ledgerq.cli.context import CliContext, pass_cli
from ledgerq.cli.output import counts_table


@click.group("queue")
def group() -> None:
    """Inspect, pause and resume queues."""


@group.command("stats")
@pass_cli
def stats(cli: CliContext) -> int:
    """Jobs per queue and state."""
    counts = cli.app().client.store.count_jobs()
    if cli.as_json:
        out: dict[str, dict[str, int]] = {}
        for (queue, state), n in counts.items():
            out.setdefault(queue, {})[state.value] = n
        cli.emit_json(out)
    else:
        cli.console.print(counts_table(counts))
    return 0


@group.command("pause")
@click.argument("name")
@pass_cli
def pause(cli: CliContext, name: str) -> int:
    """Stop workers from claiming jobs of queue NAME (enqueues still succeed)."""
    operations.queue_controls(cli.app().parts).pause_queue(name)
    click.echo(f"queue {name} paused")
    return 0


@group.command("resume")
@click.argument("name")
@pass_cli
def resume(cli: CliContext, name: str) -> int:
    """Let workers claim jobs of queue NAME again."""
    operations.queue_controls(cli.app().parts).resume_queue(name)
    click.echo(f"queue {name} resumed")
    return 0
