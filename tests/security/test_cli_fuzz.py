"""A fuzz pass over the CLI (issue 22, C): hostile strings (lone surrogates, NUL and control
characters, 10 KB strings, huge integers, NaN, deeply nested JSON, path traversal, format
strings) through every option and argument that takes a value. Whatever the exit code, the
command ends without a traceback and says at most one line of error.

Most cases run in-process through ``ledgerq.cli.main.main`` (the console script's own error
handling) against a SQLite ledger, so the pass takes seconds; a few run the real entry point.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgerq.cli.main import main

pytestmark = pytest.mark.timeout(180)

REPO_ROOT = Path(__file__).resolve().parents[2]
APP = "tests.admin.tasks_app:app"

HOSTILE = [
    "",
    " ",
    "\ud800",
    "a\x00b",
    "\x1b[31mred\x1b[0m",
    "line\nbreak",
    "x" * 10_000,
    "9" * 40,
    "9223372036854775808",
    "-9223372036854775809",
    "-1",
    "NaN",
    "inf",
    "1e309",
    "[" * 3000 + "]" * 3000,
    '{"a":' * 3000 + "1" + "}" * 3000,
    "../../../../etc/passwd",
    "%s%s%s%n{0}{__class__}",
    "'; DROP TABLE jobs; --",
    "\u202egnp.exe",
]

#: Command lines with one ``{}`` slot for a hostile value.
SLOTS = [
    ("job", "enqueue", "{}"),
    ("job", "enqueue", "admin.add", "--args", "{}"),
    ("job", "enqueue", "admin.add", "--args", "[1, 2]", "--queue", "{}"),
    ("job", "enqueue", "admin.add", "--args", "[1, 2]", "--dedupe-key", "{}"),
    ("job", "enqueue", "admin.add", "--args", "[1, 2]", "--delay", "{}"),
    ("job", "enqueue", "admin.add", "--args", "[1, 2]", "--priority", "{}"),
    ("job", "show", "{}"),
    ("job", "cancel", "{}"),
    ("job", "retry", "{}"),
    ("job", "start", "{}"),
    ("job", "list", "--queue", "{}"),
    ("job", "list", "--task", "{}"),
    ("job", "list", "--state", "{}"),
    ("job", "list", "--limit", "{}"),
    ("schedule", "add", "{}", "--cron", "* * * * *", "--task", "admin.add"),
    ("schedule", "add", "s1", "--cron", "{}", "--task", "admin.add"),
    ("schedule", "add", "s2", "--cron", "* * * * *", "--task", "{}"),
    ("schedule", "add", "s3", "--cron", "* * * * *", "--task", "admin.add", "--tz", "{}"),
    ("schedule", "add", "s4", "--cron", "* * * * *", "--task", "admin.add", "--args", "{}"),
    ("schedule", "add", "s5", "--cron", "* * * * *", "--task", "admin.add", "--queue", "{}"),
    ("schedule", "add", "s6", "--cron", "* * * * *", "--task", "admin.add", "--missed", "{}"),
    ("schedule", "add", "s7", "--cron", "* * *", "--task", "admin.add", "--max-catchup", "{}"),
    ("schedule", "pause", "{}"),
    ("schedule", "remove", "{}"),
    ("schedule", "runs", "{}"),
    ("queue", "pause", "{}"),
    ("queue", "resume", "{}"),
    ("batch", "show", "{}"),
    ("workflow", "show", "{}"),
    ("workflow", "cancel", "{}"),
]


def _argv(slot: tuple[str, ...], value: str) -> list[str]:
    return [value if part == "{}" else part for part in slot]


def assert_clean_exit(code: object, err: str, argv: list[str]) -> None:
    """An int exit code; no traceback; at most one line of error (click's usage errors: its
    usage lines and one ``Error:`` line)."""
    shown = f"argv={[a[:60] for a in argv]!r} exit={code!r}\nstderr: {err[:2000]}"
    assert isinstance(code, int), shown
    assert "Traceback" not in err, shown
    lines = [line for line in err.splitlines() if line.strip()]
    if code == 2:
        assert sum(line.startswith("Error:") for line in lines) == 1, shown
    else:
        assert len(lines) <= 1, shown


@pytest.fixture
def sqlite_url(make_database_url: Callable[[str], str], monkeypatch: pytest.MonkeyPatch) -> str:
    for name in [k for k in os.environ if k.startswith("LEDGERQ_")]:
        monkeypatch.delenv(name)
    url = make_database_url("sqlite")
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", url)
    monkeypatch.setenv("LEDGERQ_APP", APP)
    return url


@pytest.mark.parametrize("slot", SLOTS, ids=lambda slot: " ".join(slot))
def test_hostile_values_never_make_a_traceback(
    slot: tuple[str, ...], sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for value in HOSTILE:
        argv = _argv(slot, value)
        try:
            code = main(argv)
        except SystemExit as exc:  # pragma: no cover - a failure worth naming
            pytest.fail(f"SystemExit({exc.code}) escaped main() for {argv!r}")
        _, err = capsys.readouterr()
        assert_clean_exit(code, err, argv)


SUBPROCESS_CASES = [
    ("job", "enqueue", "admin.add", "--args", "[" * 5000 + "]" * 5000),
    ("job", "enqueue", "admin.add", "--args", '["\\ud800"]'),
    ("job", "show", "9" * 40),
    ("job", "list", "--task", "a\x01b"),
    ("schedule", "add", "s", "--cron", "* * * * *", "--task", "admin.add", "--tz", "../../x"),
    ("queue", "pause", "%s%n" * 100),
]


@pytest.mark.parametrize("argv", SUBPROCESS_CASES, ids=range(len(SUBPROCESS_CASES)))
def test_the_real_entry_point_survives_hostile_values(
    argv: tuple[str, ...], sqlite_url: str
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ledgerq.cli.main", *argv],
        cwd=REPO_ROOT,
        env=dict(os.environ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert_clean_exit(result.returncode, result.stderr, list(argv))
