"""A click group whose commands are imported only when one is named or the list is shown, so
``ledgerq worker start`` does not import every other command (and rich, which most use)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

from ledgerq.cli.json_flag import accept_json_everywhere


class LazyGroup(click.Group):
    """``lazy_commands`` maps a command's name to ``"module:attribute"`` of its click command;
    commands declared on the group itself work as usual."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            command = accept_json_everywhere(_import_command(self.lazy_commands[cmd_name]))
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


def _import_command(reference: str) -> click.Command:
    module_name, _, attribute = reference.partition(":")
    command = getattr(importlib.import_module(module_name), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{reference} is not a click command")
    return command
