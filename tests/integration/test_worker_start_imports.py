"""What a worker imports before its first job, and what ``ledgerq --help`` imports: the
libraries a command does not use stay out of its start-up (issue 29 item 5). The worker is the
real console script on a real ledger; its job body records ``sys.modules`` as it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ledgerq.benchmark import first_job

LEDGERQ = str(Path(sys.executable).with_name("ledgerq"))
#: Never on the path of ``worker start`` without Redis, metrics port or schedules: the HTTP
#: stack, migrations, tables for people, metrics, cron rules, redis-py, other commands.
NOT_ON_THE_WORKER_PATH = (
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "jinja2",
    "httpx",
    "rich",
    "pygments",
    "prometheus_client",
    "croniter",
    "redis",
    "ledgerq.admin",
    "ledgerq.metrics",
    "ledgerq.demo",
    "ledgerq.benchmark",
    "ledgerq.transport.redis",
)

_APP = """
import json
import sys

from ledgerq import LedgerQ

app = LedgerQ()


@app.task(name="modules", queue="imports")
def modules(ctx, path):
    with open(path, "w") as out:
        json.dump(sorted(sys.modules), out)


@app.task(name="collector", queue="imports")
def collector(ctx, path):
    import gc

    state = {
        "enabled": gc.isenabled(),
        "full_collections": gc.get_stats()[2]["collections"],
        "frozen": gc.get_freeze_count(),
        "unfrozen": len(gc.get_objects()),
    }
    with open(path, "w") as out:
        json.dump(state, out)
"""


def _loaded(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(
        name for name in modules if any(name == p or name.startswith(p + ".") for p in prefixes)
    )


def _env(tmp_path: Path, database_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}
    env.update(LEDGERQ_DATABASE_URL=database_url, PYTHONPATH=str(tmp_path))
    return env


def _run_one_job(tmp_path: Path, url: str, task_name: str, cli: list[str]) -> Any:
    """Enqueue one job of the probe application's task ``task_name`` on ``url``, run it with
    ``cli ... worker start --once`` in a process of its own and return what its body
    recorded (JSON)."""
    (tmp_path / "imports_app.py").write_text(textwrap.dedent(_APP))
    sys.path.insert(0, str(tmp_path))
    try:
        import imports_app  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("imports_app", None)
    imports_app.app.reconfigure(database_url=url)
    record = tmp_path / f"{task_name}.json"
    try:
        getattr(imports_app, task_name).enqueue(str(record))
    finally:
        imports_app.app.close()
    argv = [*cli, "--app", "imports_app:app", "worker", "start", "--once"]
    argv += ["--queues", "imports", "--concurrency", "1"]
    done = subprocess.run(
        argv, env=_env(tmp_path, url), capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(record.read_text())


def test_a_polling_worker_reaches_its_first_job_without_the_libraries_it_does_not_use(
    make_database_url: Any, tmp_path: Path
) -> None:
    loaded: list[str] = _run_one_job(
        tmp_path, make_database_url("postgresql"), "modules", [LEDGERQ]
    )
    assert "psycopg" in loaded and "sqlalchemy" in loaded  # the record is the worker's own
    assert _loaded(loaded, NOT_ON_THE_WORKER_PATH) == []
    other_commands = [
        name
        for name in loaded
        if name.startswith("ledgerq.cli.commands.") and name != "ledgerq.cli.commands.worker_cmd"
    ]
    assert other_commands == []


@pytest.mark.parametrize(
    "cli", [[LEDGERQ], [sys.executable, "-m", "ledgerq.cli.main"]], ids=["script", "module"]
)
def test_a_worker_starts_without_a_full_collection_and_runs_with_its_start_up_frozen(
    make_database_url: Any, tmp_path: Path, cli: list[str]
) -> None:
    # Start-up (the command's import, the application, the connections) builds what lives as
    # long as the worker: the collector is paused meanwhile, then on again with all of it
    # frozen, so no pass walks it (a full one cost 35-45 ms of each start on a 2-core VM).
    state = _run_one_job(tmp_path, make_database_url("postgresql"), "collector", cli)
    assert state["enabled"] and state["full_collections"] == 0, state
    # Nearly everything alive is frozen: what the collector still walks is what the running
    # worker made since (its threads' and the job's objects).
    assert state["frozen"] > 100_000 and state["unfrozen"] < state["frozen"] / 10, state


@pytest.mark.parametrize("argv", [["--help"], ["--version"]])
def test_help_and_version_import_neither_the_store_nor_the_settings(argv: list[str]) -> None:
    probe = (
        "import json, sys\n"
        f"sys.argv = ['ledgerq', *{argv!r}]\n"
        "from ledgerq.cli.entry import main\n"
        "code = main()\n"
        "print(json.dumps([code, sorted(sys.modules)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    code, loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0
    heavy = ("sqlalchemy", "psycopg", "pydantic", "pydantic_settings", "ledgerq.app")
    assert _loaded(loaded, (*heavy, *NOT_ON_THE_WORKER_PATH)) == []


def test_the_start_up_probe_times_a_real_worker_to_its_first_job(
    make_database_url: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    url = make_database_url("postgresql")
    assert first_job.main(["--database-url", url, "--ledgerq", LEDGERQ, "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(LEDGERQ + "\n")
    for label in ("exec -> first job body", "exec -> exit (--once)", "CPU (user + system)"):
        assert f"  {label}:" in out and "(n=2)" in out.split(label)[1].splitlines()[0]


def test_the_start_up_probe_names_an_unreachable_ledger_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "postgresql://postgres@127.0.0.1:1/nothing"
    assert first_job.main(["--database-url", url, "--runs", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: database unavailable") and err.count("\n") == 1
