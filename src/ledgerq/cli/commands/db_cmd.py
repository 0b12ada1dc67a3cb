"""``ledgerq db migrate|status``."""

from __future__ import annotations

import click

from ledgerq.cli.cli_context import CliContext, pass_cli


@click.group("db")
def group() -> None:
    """Create, upgrade and inspect the ledger's tables."""


@group.command("migrate")
@pass_cli
def migrate(cli: CliContext) -> int:
    """Create or upgrade the tables to the newest revision."""
    status = cli.app().migrate()
    if cli.as_json:
        cli.emit_json({"current": status.current, "head": status.head})
    else:
        cli.console.print(f"database at revision [bold]{status.current}[/] (newest: {status.head})")
    return 0


@group.command("status")
@pass_cli
def status(cli: CliContext) -> int:
    """Show the database's revision; exit 1 if a migration is pending."""
    state = cli.app().parts.migration_status()
    if cli.as_json:
        cli.emit_json(
            {"current": state.current, "head": state.head, "up_to_date": state.up_to_date}
        )
    else:
        verdict = (
            "up to date" if state.up_to_date else "migration pending: run `ledgerq db migrate`"
        )
        cli.console.print(f"revision {state.current or 'none'} of {state.head}: {verdict}")
    return 0 if state.up_to_date else 1
