"""``ledgerq queue list-locks|clear-stale-locks``: the fleet's distributed locks as the ledger
records them (owner, fencing token, age, expiry, whether the owner is alive)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click
from rich.table import Table

from ledgerq.app import operations_surface
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.core.locks import LockRecord


def lock_dict(record: LockRecord) -> dict[str, Any]:
    """A lock record as plain JSON-ready data."""
    return {
        "name": record.name,
        "owner": record.owner,
        "token": record.token,
        "acquired_at": record.acquired_at.isoformat(),
        "expires_at": record.expires_at.isoformat(),
        "age_seconds": round(record.age_seconds, 3),
        "expires_in_seconds": round(record.expires_in_seconds, 3),
        "owner_alive": record.owner_alive,
        "stale": record.stale,
    }


def locks_table(records: Sequence[LockRecord], title: str) -> Table:
    """A table of lock records for people."""
    table = Table(title=title)
    for column in ("name", "owner", "token", "age", "expires in", "owner alive", "stale"):
        table.add_column(column, overflow="fold")
    for r in records:
        expiry = f"{r.expires_in_seconds:.1f} s" if r.expires_in_seconds > 0 else "expired"
        table.add_row(
            r.name,
            r.owner,
            str(r.token),
            f"{r.age_seconds:.1f} s",
            expiry,
            "yes" if r.owner_alive else "no",
            "yes" if r.stale else "no",
        )
    return table


@click.command("list-locks")
@click.option("--stale", "only_stale", is_flag=True, help="Only expired or dead-owner locks.")
@pass_cli
def list_locks(cli: CliContext, only_stale: bool) -> int:
    """Held and stale distributed locks: owner, fencing token, age, expiry, owner alive."""
    records = operations_surface.lock_admin(cli.app().parts).list_locks()
    if only_stale:
        records = [r for r in records if r.stale]
    if cli.as_json:
        cli.emit_json([lock_dict(r) for r in records])
    elif not records:
        click.echo("no locks held")
    else:
        cli.console.print(locks_table(records, "distributed locks"))
    return 0


@click.command("clear-stale-locks")
@pass_cli
def clear_stale_locks(cli: CliContext) -> int:
    """Release locks whose lease expired or whose owner worker is no longer active (with
    ``LOCKS_BACKEND=redis``, their Redis keys too). Their fencing counters are kept, so every
    later token is still higher."""
    app = cli.app()
    cleared = operations_surface.clear_stale_locks(app.settings, app.parts)
    if cli.as_json:
        cli.emit_json(
            {
                "cleared": len(cleared.records),
                "keys_deleted": cleared.keys_deleted,
                "locks": [lock_dict(r) for r in cleared.records],
            }
        )
        return 0
    click.echo(f"cleared {len(cleared.records)} stale lock(s)")
    if app.settings.locks_backend == "redis":
        click.echo(f"deleted {cleared.keys_deleted} Redis lock key(s)")
    for r in cleared.records:
        click.echo(f"  {r.name} (owner {r.owner}, token {r.token})")
    return 0
