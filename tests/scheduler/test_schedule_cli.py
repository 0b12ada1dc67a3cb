"""``ledgerq schedule ...`` in-process through ``main(argv)``: the happy path on every database,
and one clear line with a non-zero exit for each kind of bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledgerq.cli.main import main
from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_list_pause_resume_remove(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "200")  # rich would fold the table's cells at 80
    code, out, _ = run(
        capsys,
        "schedule",
        "add",
        "nightly-report",
        "--cron",
        "30 2 * * *",
        "--task",
        "reports.build",
        "--args",
        '{"customer": 7}',
        "--tz",
        "Europe/Berlin",
        "--queue",
        "reports",
        "--missed",
        "once",
        "--overlap",
        "skip",
    )
    assert (code, out.strip()) == (0, "schedule nightly-report added")
    code, out, _ = run(capsys, "schedule", "list", "--json")
    (listed,) = json.loads(out)
    assert listed | {"last_tick": None} == {
        "name": "nightly-report",
        "cron": "30 2 * * *",
        "tz": "Europe/Berlin",
        "task": "reports.build",
        "args": {"args": [], "kwargs": {"customer": 7}},
        "queue": "reports",
        "paused": False,
        "missed": "once",
        "max_catchup": 10,
        "overlap": "skip",
        "source": "runtime",
        "last_tick": None,
        "next_tick": None,
    }
    assert run(capsys, "schedule", "pause", "nightly-report")[:2] == (
        0,
        "schedule nightly-report paused\n",
    )
    assert json.loads(run(capsys, "--json", "schedule", "list")[1])[0]["paused"] is True
    code, out, _ = run(capsys, "schedule", "list")
    assert code == 0 and "nightly-report" in out and "paused" in out
    assert run(capsys, "schedule", "resume", "nightly-report", "--json")[:2] == (
        0,
        json.dumps({"name": "nightly-report", "action": "resumed"}, indent=2) + "\n",
    )
    assert run(capsys, "--json", "schedule", "runs", "nightly-report")[:2] == (0, "[]\n")
    assert run(capsys, "schedule", "remove", "nightly-report")[0] == 0
    assert json.loads(run(capsys, "--json", "schedule", "list")[1]) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--cron", "61 * * * *"), "error: invalid cron expression '61 * * * *'"),
        (("--cron", "every day"), "error: invalid cron expression 'every day': expected 5"),
        (("--cron", "* * * * *", "--tz", "Europe/Atlantis"), "error: unknown time zone"),
        (("--cron", "* * * * *", "--missed", "sometimes"), "error: missed must be skip, once"),
        (("--cron", "* * * * *", "--args", "{oops"), "error: --args is not JSON"),
        (("--cron", "* * * * *", "--queue", "no spaces"), "error: invalid queue name"),
    ],
)
def test_bad_input_is_one_clear_line_and_a_non_zero_exit(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: tuple[str, ...],
    message: str,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = create_engine(url)
    migrate(engine)
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", url)
    code, out, err = run(capsys, "schedule", "add", "s", "--task", "t", *extra)
    assert code == 1 and out == ""
    assert err.startswith(message) and err.count("\n") == 1, err
    code, _, err = run(capsys, "schedule", "list", "--json")
    assert code == 0
    engine.dispose()


def test_unknown_schedules_and_duplicates_are_clear_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = create_engine(url)
    migrate(engine)
    engine.dispose()
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", url)
    for action in ("pause", "resume", "remove", "runs"):
        assert run(capsys, "schedule", action, "ghost")[::2] == (
            1,
            "error: no schedule named 'ghost'\n",
        )
    assert run(capsys, "schedule", "add", "s", "--task", "t", "--cron", "* * * * *")[0] == 0
    assert run(capsys, "schedule", "add", "s", "--task", "t", "--cron", "* * * * *")[::2] == (
        1,
        "error: a schedule named 's' exists\n",
    )
