"""``ledgerq queue stats``."""

from __future__ import annotations

import click

from ledgerq.cli.context import CliContext, pass_cli
from ledgerq.cli.output import counts_table


@click.group("queue")
def group() -> None:
    """Inspect queues."""


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
