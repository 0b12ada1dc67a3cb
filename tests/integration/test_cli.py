"""The CLI in-process, through ``main(argv)``: each command's happy path and its JSON."""

from __future__ import annotations

import gc
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq.cli.main import main
from tests.helpers import wait_until


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[str]:
    """A throwaway application module on sys.path, configured for this test's database."""
    name = f"cliapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from ledgerq import LedgerQ

            app = LedgerQ()

            @app.task(name="frozen")
            def frozen(ctx):
                import gc

                return gc.get_freeze_count()

            @app.task(name="add", max_attempts=2, retry_backoff=0.01)
            def add(ctx, a, b):
                if a < 0:
                    raise ValueError("negative")
                return a + b
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    monkeypatch.setenv("LEDGERQ_APP", f"{name}:app")
    monkeypatch.setenv("LEDGERQ_POLL_INTERVAL", "0.05")
    yield name
    sys.modules.pop(name, None)


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    capsys.readouterr()
    assert main(["--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_enqueue_run_inspect_retry_cancel(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ok = run_json(capsys, "job", "enqueue", "add", "--args", "[2, 3]")
    bad = run_json(capsys, "job", "enqueue", "add", "--args", '{"a": -1, "b": 0}')
    later = run_json(capsys, "job", "enqueue", "add", "--args", "[1, 1]", "--delay", "3600")
    assert isinstance(ok, dict) and isinstance(bad, dict) and isinstance(later, dict)
    assert (
        run_json(capsys, "job", "enqueue", "add", "--args", "[2, 3]", "--dedupe-key", "k")[
            "duplicate"
        ]
        is False
    )  # type: ignore[index]
    assert (
        run_json(capsys, "job", "enqueue", "add", "--args", "[9, 1]", "--dedupe-key", "k")[
            "duplicate"
        ]
        is True
    )  # type: ignore[index]

    assert main(["worker", "start", "--burst", "--concurrency", "2"]) == 0
    shown = run_json(capsys, "job", "show", str(ok["id"]))
    assert shown["state"] == "succeeded" and shown["result"] == 5  # type: ignore[index]
    dead = run_json(capsys, "job", "show", str(bad["id"]))
    assert (
        dead["state"] == "dead" and dead["attempt"] == 2 and dead["error"]["type"] == "ValueError"
    )  # type: ignore[index]

    assert run_json(capsys, "job", "retry", str(bad["id"])) == {"id": bad["id"], "state": "queued"}
    assert run_json(capsys, "job", "cancel", str(later["id"])) == {
        "id": later["id"],
        "state": "cancelled",
    }
    listed = run_json(capsys, "job", "list", "--state", "cancelled")
    assert [j["id"] for j in listed] == [later["id"]]  # type: ignore[union-attr,index]
    stats = run_json(capsys, "queue", "stats")
    assert isinstance(stats, dict)
    lifetime = stats["default"].pop("lifetime")
    assert stats == {"default": {"succeeded": 2, "queued": 1, "cancelled": 1}}
    assert lifetime["enqueued"] == 4 and lifetime["succeeded"] == 2
    assert lifetime["tasks"]["add"]["cancelled"] == 1


def test_once_runs_a_single_job(app_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(3):
        run_json(capsys, "job", "enqueue", "add", "--args", f"[{i}, 0]")
    assert main(["worker", "start", "--once"]) == 0
    stats = run_json(capsys, "queue", "stats")
    assert isinstance(stats, dict)
    del stats["default"]["lifetime"]
    assert stats == {"default": {"succeeded": 1, "queued": 2}}


def _enqueued_id(capsys: pytest.CaptureFixture[str], task: str, args: str) -> int:
    enqueued = run_json(capsys, "job", "enqueue", task, "--args", args)
    assert isinstance(enqueued, dict)
    return int(enqueued["id"])


def test_a_worker_has_written_every_job_line_when_it_returns(
    app_module: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledgerq.cli import log_output

    # Gathered lines would wait a minute: only the worker's stop can have written them.
    monkeypatch.setattr(log_output, "GATHER_SECONDS", 60.0)
    ids = [_enqueued_id(capsys, "add", f"[{i}, 1]") for i in range(5)]
    assert main(["worker", "start", "--burst", "--concurrency", "2"]) == 0
    err = capsys.readouterr().err
    started = [line for line in err.splitlines() if "job started" in line]
    succeeded = [line for line in err.splitlines() if "job succeeded" in line]
    for job_id in ids:
        assert sum(f" job_id={job_id} " in line for line in started) == 1
        assert sum(f" job_id={job_id} " in line for line in succeeded) == 1
    assert err.index("worker stopped") > err.index(succeeded[-1])  # in order
    # Once the worker stopped, every line is written at once again.
    import structlog

    structlog.get_logger("ledgerq.test").info("after the worker")
    assert "after the worker" in capsys.readouterr().err


def test_a_worker_keeps_its_start_up_objects_out_of_full_collections(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = run_json(capsys, "job", "enqueue", "frozen")
    assert main(["worker", "start", "--once"]) == 0
    assert run_json(capsys, "job", "show", str(job["id"]))["result"] > 0  # type: ignore[index]
    # Run inside this process, the worker hands both back once it stopped: the collector on,
    # nothing frozen (the console script's own process keeps them frozen to its exit).
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_db_status_and_config_show(app_module: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = run_json(capsys, "db", "status")
    assert status["up_to_date"] is True  # type: ignore[index]
    shown = run_json(capsys, "config", "show")
    assert shown["poll_interval"] == 0.05 and shown["app"] == f"{app_module}:app"  # type: ignore[index]


def test_user_mistakes_are_one_line_errors(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = [
        (["job", "show", "987654"], "no job with id 987654"),
        (["job", "enqueue", "nope"], "unknown task 'nope'"),
        (["job", "retry", "987654"], "no job with id 987654"),
    ]
    for argv, message in cases:
        capsys.readouterr()
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_lifetime_figures_in_queue_stats_survive_the_retention_prune(
    app_module: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for args in ("[1, 2]", "[3, 4]", "[-1, 0]"):
        run_json(capsys, "job", "enqueue", "add", "--args", args)
    assert main(["worker", "start", "--burst"]) == 0
    before = run_json(capsys, "queue", "stats")
    assert isinstance(before, dict)
    figures = {"enqueued": 3, "succeeded": 2, "dead": 1, "cancelled": 0, "expired": 0}
    assert before["default"]["lifetime"] == {**figures, "tasks": {"add": figures}}

    # The retention path: a reconciler pass with a retention every finished job is past.
    monkeypatch.setenv("LEDGERQ_RETENTION_SUCCEEDED", "0.001")
    monkeypatch.setenv("LEDGERQ_RETENTION_FAILED", "0.001")
    sys.modules.pop(app_module)  # its application reads the settings when imported

    def pruned() -> bool:
        assert main(["reconcile", "--once"]) == 0
        now = run_json(capsys, "queue", "stats")
        return isinstance(now, dict) and set(now["default"]) == {"lifetime"}

    wait_until(pruned, what="every finished job deleted by the retention")
    assert run_json(capsys, "queue", "stats") == {
        "default": {"lifetime": before["default"]["lifetime"]}
    }
    capsys.readouterr()
    assert main(["queue", "stats"]) == 0
    table = capsys.readouterr().out
    assert "since the beginning" in table
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines()]
    assert ["default", "add", "3", "2", "1", "0", "0"] in rows


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--start-method", "exec"], "--start-method"),
        (["--max-memory", "100"], "--max-memory"),
        (["--processes", "2", "--once"], "--once"),
    ],
)
def test_a_managers_option_without_a_manager_is_a_usage_error(
    app_module: str, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    capsys.readouterr()
    assert main(["worker", "start", *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
