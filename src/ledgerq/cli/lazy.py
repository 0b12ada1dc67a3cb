"""A click group whose commands are imported only when one is named, so ``ledgerq worker start``
does not import every other command (and rich, which most use). The group's ``--help`` lists
commands from their ``lazy_help`` lines where given (importing every command, and with them the
store and the HTTP libraries, would cost ``ledgerq --help`` most of a second)."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Mapping
from typing import Any

import click

from ledgerq.cli.json_flag import accept_json_everywhere

#: Whether a command's import is frozen out of the garbage collector's view once done.
_freezing_imports = False


def freeze_command_imports() -> None:
    """Freeze what is imported so far (``gc.freeze()``) and, from now on, what each command's
    import builds, so the collector's passes never walk the modules again. Only a process the
    CLI owns asks for it (the console script, ``python -m ledgerq.cli.main``); a process that
    runs the CLI inside itself (tests) does not."""
    global _freezing_imports
    gc.freeze()
    _freezing_imports = True


def freezing_imports() -> bool:
    """Whether this process is the console script's, which froze what it imported (see
    ``freeze_command_imports``)."""
    return _freezing_imports


class LazyGroup(click.Group):
    """``lazy_commands`` maps a command's name to ``"module:attribute"`` of its click command,
    ``lazy_help`` (optional) a command's name to its short help, shown by ``--help`` without
    importing it (``tests/unit/test_cli_lazy.py`` holds each line to its command's own);
    commands declared on the group itself work as usual."""

    def __init__(
        self,
        *args: Any,
        lazy_commands: Mapping[str, str],
        lazy_help: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands)
        self.lazy_help = dict(lazy_help or {})

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands' list of ``--help``: a ``lazy_help`` line for a command not imported
        yet, else the command's own short help (as click.Group does)."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows: list[tuple[str, str]] = []
        for name in names:
            if name in self.lazy_help and name not in self.commands:
                # A bare Command shortens the line exactly as the real one would.
                stand_in = click.Command(name, help=self.lazy_help[name])
                rows.append((name, stand_in.get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            command = accept_json_everywhere(_import_command(self.lazy_commands[cmd_name]))
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


def _import_command(reference: str) -> click.Command:
    module_name, _, attribute = reference.partition(":")
    # A command's import is most of a command's start (``worker start``: SQLAlchemy,
    # pydantic, the store), and its objects live as long as the process: the cyclic garbage
    # collector, left on, runs a full pass over them that finds nothing (35-45 ms of a
    # worker's start on a 2-core VM). So it is paused for the import and, in the console
    # script's process, what the import built is then frozen (see ``freeze_command_imports``).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        module = importlib.import_module(module_name)
    finally:
        if was_enabled:
            gc.enable()
    if _freezing_imports:
        gc.freeze()
    command = getattr(module, attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{reference} is not a click command")
    return command
