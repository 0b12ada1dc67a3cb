"""One CLI grammar: ``--json`` after the subcommand as before it, ``job enqueue`` with the
options the HTTP API has, and ``job show`` / ``job list`` as text a person reads."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from ledgerq.cli.main import main

BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[str]:
    name = f"grammarapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from ledgerq import LedgerQ

            app = LedgerQ()

            @app.task(name="add")
            def add(ctx, a, b):
                return a + b

            @app.task(name="boom", max_attempts=1)
            def boom(ctx, what):
                raise ValueError(f"bad [red]{what}[/red]\\nsecond line")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    monkeypatch.setenv("LEDGERQ_APP", f"{name}:app")
    monkeypatch.setenv("LEDGERQ_POLL_INTERVAL", "0.05")
    yield name
    sys.modules.pop(name, None)


def output_of(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_json_may_follow_the_subcommand(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    created = json.loads(output_of(capsys, "job", "enqueue", "add", "--args", "[1, 2]", "--json"))
    before = json.loads(output_of(capsys, "--json", "job", "list"))
    after = json.loads(output_of(capsys, "job", "list", "--json"))
    assert before == after and [job["id"] for job in after] == [created["id"]]
    assert json.loads(output_of(capsys, "queue", "stats", "--json")) == json.loads(
        output_of(capsys, "--json", "queue", "stats")
    )
    shown = json.loads(output_of(capsys, "job", "show", str(created["id"]), "--json"))
    assert shown["args"] == {"args": [1, 2], "kwargs": {}}
    assert json.loads(output_of(capsys, "schedule", "list", "--json")) == []


def test_enqueue_takes_the_options_the_api_has(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_at = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)
    expires = run_at + timedelta(days=1)
    argv = ["job", "enqueue", "add", "--args", "[1, 2]", "--json", "--max-attempts", "7"]
    argv += ["--timeout", "2.5", "--run-at", run_at.isoformat(), "--dedupe-key", "k"]
    argv += ["--dedupe-for", "60", "--expires-at", expires.astimezone(BERLIN).isoformat()]
    created = json.loads(output_of(capsys, *argv))
    job = json.loads(output_of(capsys, "job", "show", str(created["id"]), "--json"))
    assert (job["max_attempts"], job["timeout_seconds"], job["state"]) == (7, 2.5, "scheduled")
    assert datetime.fromisoformat(job["run_at"]) == run_at
    assert datetime.fromisoformat(job["expires_at"]) == expires
    for bad, message in [
        (("--run-at", run_at.replace(tzinfo=None).isoformat()), "needs a time zone"),
        (("--run-at", "2999-01-01T00:00:00Z"), "within a year"),
        (("--expires-at", "soon"), "not an ISO 8601 time"),
        (("--timeout", "-1"), "timeout"),
    ]:
        capsys.readouterr()
        assert main(["job", "enqueue", "add", "--args", "[1, 2]", *bad]) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    assert len(json.loads(output_of(capsys, "job", "list", "--json"))) == 1


def test_show_and_list_are_text_a_person_reads(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    created = json.loads(output_of(capsys, "job", "enqueue", "boom", "--args", '["x ü"]', "--json"))
    assert main(["worker", "start", "--burst", "--concurrency", "1"]) == 0
    shown = output_of(capsys, "job", "show", str(created["id"]))
    assert '"args": ["x ü"]' in shown  # JSON, not a Python repr
    assert "ValueError: bad [red]x ü[/red]\nsecond line (kind exception" in shown  # real breaks
    assert "Traceback (most recent call last):\n" in shown
    listed = output_of(capsys, "job", "list")
    assert "[red]x" in listed  # a message's markup is shown, not applied
    assert max(len(line) for line in listed.splitlines()) <= 80


def test_stats_and_worker_tables_read_at_80_columns(
    app_module: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    output_of(capsys, "job", "enqueue", "add", "--args", "[1, 2]", "--queue", "emails-high-prio")
    output_of(capsys, "job", "enqueue", "boom", "--args", '["x"]')
    queues = "default,emails-high-prio,reports-nightly"
    assert main(["worker", "start", "--burst", "--queues", queues]) == 0
    output_of(capsys, "job", "enqueue", "add", "--args", "[3, 4]")
    stats = output_of(capsys, "queue", "stats")
    assert max(len(line) for line in stats.splitlines()) <= 80
    assert "emails-high-prio" in stats and "…" not in stats  # names and headers whole
    for header in ("queued", "running", "succeeded", "dead"):
        assert header in stats
    workers = output_of(capsys, "worker", "list", "--all")
    assert max(len(line) for line in workers.splitlines()) <= 80
    worker_id = json.loads(output_of(capsys, "worker", "list", "--all", "--json"))[0]["worker_id"]
    assert worker_id in workers  # the id a person copies is on one line


def test_schedule_table_reads_at_80_columns(
    app_module: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    add = ["schedule", "add", "nightly-rollup", "--task", "add", "--cron", "*/5 * * * *"]
    output_of(capsys, *add, "--queue", "maintenance")
    listed = output_of(capsys, "schedule", "list")
    assert max(len(line) for line in listed.splitlines()) <= 80
    for whole in ("nightly-rollup", "*/5 * * * *", "maintenance", "skip/allow", "next run"):
        assert whole in listed
    assert "…" not in listed
