"""``ledgerq bench``."""

from __future__ import annotations

import click


@click.command("bench")
def command() -> int:
    """Not built yet."""
    raise click.ClickException("not built yet")
