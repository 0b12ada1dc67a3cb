"""The command line imports a command's module only when that command runs: every lazily
named command resolves to the command of that name, and starting a worker imports neither the
other commands nor rich, nor the metrics (unless it serves them) or the cron rules (unless it
runs the scheduler): tens of milliseconds of every worker's start-up each."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from ledgerq.cli.lazy import LazyGroup
from ledgerq.cli.main import TOP_LEVEL_COMMANDS, TOP_LEVEL_HELP, cli


def _lazy_groups() -> list[tuple[str, LazyGroup]]:
    ctx = click.Context(cli)
    groups: list[tuple[str, LazyGroup]] = [("ledgerq", cli)]  # type: ignore[list-item]
    for name in ("worker", "queue"):
        group = cli.get_command(ctx, name)
        assert isinstance(group, LazyGroup)
        groups.append((name, group))
    return groups


@pytest.mark.parametrize(("path", "group"), _lazy_groups())
def test_every_lazily_named_command_resolves_to_that_command(path: str, group: LazyGroup) -> None:
    ctx = click.Context(group)
    assert set(group.lazy_commands) <= set(group.list_commands(ctx))
    for name in group.lazy_commands:
        command = group.get_command(ctx, name)
        assert isinstance(command, click.Command), f"{path} {name}"
        assert command.name == name, f"{path} {name} resolves to {command.name}"


def test_starting_a_worker_imports_no_other_command_rich_metrics_or_cron() -> None:
    probe = (
        "import sys, click\n"
        "from ledgerq.cli.main import cli\n"
        "worker = cli.get_command(click.Context(cli), 'worker')\n"
        "worker.get_command(click.Context(worker), 'start')\n"
        "import ledgerq.app.application, ledgerq.app.wiring\n"
        "optional = ('rich', 'pygments', 'prometheus_client', 'croniter')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in optional\n"
        "    or m.startswith('ledgerq.cli.commands.') and m != 'ledgerq.cli.commands.worker_cmd')\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def test_every_top_level_help_line_is_its_commands_own() -> None:
    """``ledgerq --help`` lists the commands without importing them: each line it shows must
    be the command's own short help."""
    assert set(TOP_LEVEL_HELP) == set(TOP_LEVEL_COMMANDS)
    ctx = click.Context(cli)
    for name, line in TOP_LEVEL_HELP.items():
        command = cli.get_command(ctx, name)
        assert command is not None
        assert line == command.get_short_help_str(limit=10_000), name
