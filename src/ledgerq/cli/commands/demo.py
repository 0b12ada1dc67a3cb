"""``ledgerq demo``."""

from __future__ import annotations

import click


@click.command("demo")
def command() -> int:
    """Not built yet."""
    raise click.ClickException("not built yet")
