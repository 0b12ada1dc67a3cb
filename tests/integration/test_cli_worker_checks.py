"""What a worker says as it starts, in-process through ``main(argv)`` on every backend: the
banner (version, masked database, driver, queues, concurrency, task count), a warning naming
each task or schedule whose queue no worker consumes (its own queues and the live fleet's
count), and ``worker validate-config`` reporting the same; a password is never shown."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

import ledgerq
from ledgerq import LedgerQ
from ledgerq.cli import worker_checks
from ledgerq.cli.main import main
from ledgerq.core import fleet
from ledgerq.store.engine import create_engine
from ledgerq.store.fleet_admin import SqlFleetAdmin

#: A PostgreSQL URL with a password, on a port nothing listens on.
SECRET_URL = "postgresql://app:s3cret-pw@127.0.0.1:1/ledger"


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database_url: str) -> Iterator[str]:
    """An application with a task on queue "sms", one on "default" and a schedule of the sms
    task, configured for this test's (migrated) database."""
    name = f"checksapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from ledgerq import LedgerQ

            app = LedgerQ()

            @app.periodic(cron="0 8 * * *", name="digest")
            @app.task(name="send_sms", queue="sms")
            def send_sms(ctx):
                return None

            @app.task(name="report")
            def report(ctx):
                return None
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    monkeypatch.setenv("LEDGERQ_APP", f"{name}:app")
    monkeypatch.setenv("LEDGERQ_POLL_INTERVAL", "0.05")
    yield name
    sys.modules.pop(name, None)


def start_burst(capsys: pytest.CaptureFixture[str], *queues: str) -> str:
    """Run ``worker start --burst`` on ``queues``; return what it logged (stderr)."""
    capsys.readouterr()
    assert main(["worker", "start", "--queues", ",".join(queues), "--burst"]) == 0
    return capsys.readouterr().err


def test_a_worker_names_the_task_and_schedule_whose_queue_nobody_consumes(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    err = start_burst(capsys, "default")
    banner = next(line for line in err.splitlines() if "ledgerq worker" in line)
    for field in (
        f"version={ledgerq.__version__}",
        "driver=dbpoll",
        "queues=['default']",
        "concurrency=",
        "tasks=2",
        "database=",
    ):
        assert field in banner, banner
    warnings = [line for line in err.splitlines() if "[warning" in line]
    assert len(warnings) == 2, err
    assert "task send_sms enqueues to queue 'sms'" in warnings[0]
    assert "schedule digest (task send_sms) enqueues to queue 'sms'" in warnings[1]
    assert "report" not in "".join(warnings)  # its queue, default, is this worker's

    assert "[warning" not in start_burst(capsys, "default", "sms")


def test_a_live_worker_of_the_fleet_on_the_queue_silences_the_warning(
    app_module: str, capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    engine = create_engine(database_url)
    admin = SqlFleetAdmin(engine)
    try:
        admin.register_worker(fleet.Registration("h:1:a", "h", 1, ("sms",), 4, "0.1.0"))
        assert "[warning" not in start_burst(capsys, "default")
        admin.deregister_worker("h:1:a")  # stopped: no longer consumes anything
        assert "queue 'sms'" in start_burst(capsys, "default")
    finally:
        engine.dispose()


def test_validate_config_reports_the_same_work_without_failing(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["worker", "validate-config"]) == 0
    out = capsys.readouterr().out
    assert "warning: task send_sms enqueues to queue 'sms'" in out
    assert "warning: schedule digest (task send_sms)" in out
    assert out.rstrip().endswith("ok")
    assert main(["--json", "worker", "validate-config", "--queues", "sms,default"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["ok"] is True and shown["warnings"] == []
    assert shown["queues"] == "sms,default" and shown["tasks"] == 2


def test_the_banner_and_validate_config_never_show_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    app = LedgerQ(database_url=SECRET_URL, queues=("default",))

    @app.task(queue="sms")
    def send_sms(ctx: object) -> None:
        return None

    try:
        with capture_logs() as logs:  # as emitted, before any log redaction
            worker_checks.announce_start(app, driver="dbpoll", queues=["default"], concurrency=4)
    finally:
        app.close()
    assert logs[0]["database"] == "postgresql://app:***@127.0.0.1:1/ledger"
    assert "s3cret" not in repr(logs)
    assert any(entry.get("queue") == "sms" for entry in logs)  # warned without the fleet

    monkeypatch.chdir(tmp_path)
    for env in [k for k in os.environ if k.startswith("LEDGERQ_")]:
        monkeypatch.delenv(env)
    capsys.readouterr()
    assert main(["--database-url", SECRET_URL, "worker", "validate-config"]) == 1
    out, err = capsys.readouterr()
    assert "database: postgresql://app:***@127.0.0.1:1/ledger" in out
    assert "s3cret" not in out + err and "Traceback" not in err


def test_a_schedule_added_at_runtime_is_checked_and_a_paused_one_is_not(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    add = ["schedule", "add", "weekly-export", "--task", "report", "--cron", "0 3 * * 1"]
    assert main([*add, "--queue", "exports"]) == 0
    err = start_burst(capsys, "default", "sms")
    warnings = [line for line in err.splitlines() if "[warning" in line]
    assert len(warnings) == 1, err
    assert "schedule weekly-export (task report) enqueues to queue 'exports'" in warnings[0]
    assert main(["schedule", "pause", "weekly-export"]) == 0
    assert "[warning" not in start_burst(capsys, "default", "sms")
