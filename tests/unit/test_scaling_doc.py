"""docs/scaling.md names only what exists: every ``LEDGERQ_*`` variable is a setting, and every
``ledgerq`` command line in its code blocks resolves to a real command whose options it has."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from ledgerq.cli.main import cli
from ledgerq.config.settings import Settings

DOC = Path(__file__).parents[2] / "docs" / "scaling.md"


def _command_lines() -> list[str]:
    fenced = re.findall(r"```(\w*)\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    blocks = [body for lang, body in fenced if lang in ("", "sh", "bash")]
    lines = [line.split(" #", 1)[0].strip() for block in blocks for line in block.splitlines()]
    return [line for line in lines if re.search(r"(^|[\s/])ledgerq\s", line)]


def _check(argv: list[str]) -> None:
    """Walk ``argv`` (after ``ledgerq``) through the click tree: subcommands must exist and
    every ``--option`` must belong to the command it follows."""
    command: click.Command = cli
    ctx = click.Context(cli, info_name="ledgerq")
    tokens = iter(argv)
    for token in tokens:
        if token.startswith("-"):
            name = token.split("=", 1)[0]
            found = [p for p in command.params if name in getattr(p, "opts", [])]
            found += [p for p in command.params if name in getattr(p, "secondary_opts", [])]
            assert found, f"{command.name} has no option {name}"
            option = found[0]
            if isinstance(option, click.Option) and not option.is_flag and "=" not in token:
                next(tokens, None)
        elif isinstance(command, click.Group):
            sub = command.get_command(ctx, token)
            assert sub is not None, f"{command.name} has no command {token}"
            command = sub
        else:
            return  # a positional argument


def test_the_doc_has_command_lines() -> None:
    assert len(_command_lines()) >= 5


@pytest.mark.parametrize("line", _command_lines())
def test_every_command_line_is_a_real_command(line: str) -> None:
    tokens = shlex.split(line.replace("\\\n", " "))
    start = next(i for i, t in enumerate(tokens) if t == "ledgerq" or t.endswith("/ledgerq"))
    _check([t for t in tokens[start + 1 :] if not t.startswith("$")])


def test_every_setting_named_is_a_real_one() -> None:
    named = set(re.findall(r"\bLEDGERQ_([A-Z][A-Z0-9_]*)\b", DOC.read_text()))
    assert named, "the doc names no setting"
    unknown = sorted(n for n in named if n.lower() not in Settings.model_fields)
    assert not unknown, f"not settings: {unknown}"
