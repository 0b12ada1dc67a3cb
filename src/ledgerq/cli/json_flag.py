"""``--json`` anywhere: ``ledgerq --json job list`` and ``ledgerq job list --json`` mean the
same. Every command gets a ``--json`` flag of its own that switches the shared ``CliContext``
to machine-readable output; a command that declares its own ``--json`` keeps it."""

from __future__ import annotations

import click

from ledgerq.cli.cli_context import CliContext


def _switch_to_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.find_object(CliContext).as_json = True  # type: ignore[union-attr]


def accept_json_everywhere(command: click.Command) -> click.Command:
    """Give ``command`` and every command below it a ``--json`` flag; returns ``command``."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_json_everywhere(sub)
        return command
    if not any("--json" in param.opts for param in command.params):
        command.params.append(
            click.Option(
                ["--json"],
                is_flag=True,
                expose_value=False,
                callback=_switch_to_json,
                help="Machine-readable output (same as ledgerq --json).",
            )
        )
    return command
