"""``ledgerq queue breakers`` and ``queue reset-breaker NAME``: the fleet's circuit breakers."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.core.limits import Circuit


def breaker_dict(circuit: Circuit) -> dict[str, Any]:
    """One breaker as JSON: name, state, consecutive failures and its times (ISO 8601)."""

    def moment(value: Any) -> str | None:
        return None if value is None else value.isoformat()

    return {
        "name": circuit.name,
        "state": circuit.state.value,
        "failures": circuit.failures,
        "opened_at": moment(circuit.opened_at),
        "trial_started_at": moment(circuit.trial_started_at),
        "updated_at": moment(circuit.updated_at),
    }


@click.command("breakers")
@pass_cli
def breakers(cli: CliContext) -> int:
    """Circuit breakers: state (closed, half_open, open), failures, when they opened."""
    rows = [breaker_dict(c) for c in cli.app().limits.list_breakers()]
    if cli.as_json:
        cli.emit_json(rows)
        return 0
    table = Table(title="circuit breakers")
    for column in ("name", "state", "failures", "opened_at", "updated_at"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            *(str(row[c] or "-") for c in ("name", "state", "failures")),
            row["opened_at"] or "-",
            row["updated_at"] or "-",
        )
    cli.console.print(table)
    return 0


@click.command("reset-breaker")
@click.argument("name")
@pass_cli
def reset_breaker(cli: CliContext, name: str) -> int:
    """Close the circuit breaker NAME (as listed by ``queue breakers``) and clear its count."""
    if not cli.app().limits.reset_breaker(name):
        raise click.ClickException(
            f"no circuit breaker named {name!r} (see `ledgerq queue breakers`)"
        )
    click.echo(f"circuit breaker {name} closed")
    return 0
