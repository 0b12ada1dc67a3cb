"""``ledgerq config show``: the effective settings, secrets masked."""

from __future__ import annotations

import click
from rich.table import Table

from ledgerq.cli.cli_context import CliContext, pass_cli


@click.group("config")
def group() -> None:
    """Inspect settings."""


@group.command("show")
@pass_cli
def show(cli: CliContext) -> int:
    """Print every effective setting; passwords and tokens are masked."""
    shown = cli.settings.masked()
    if cli.as_json:
        cli.emit_json(shown)
        return 0
    table = Table(title="effective settings (LEDGERQ_*)")
    table.add_column("setting")
    table.add_column("value")
    for name, value in shown.items():
        table.add_row(name.upper(), "" if value is None else str(value))
    cli.console.print(table)
    return 0
