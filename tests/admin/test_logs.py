"""Structured logs: JSON lines carrying the running job's context, and no secrets."""

from __future__ import annotations

import json

import pytest

from ledgerq.cli.logs import redact_secrets
from ledgerq.cli.main import configure_logging
from ledgerq.core.states import JobState
from tests.admin.conftest import Served
from tests.helpers import running_worker, wait_until


def test_redaction_masks_secret_fields_and_url_passwords() -> None:
    event = {
        "event": "connecting to postgresql://app:s3cret@db/ledger",
        "api_token": "abc",
        "nested": {"password": "x", "url": "redis://:pw@cache:6379/0", "n": 1},
    }
    cleaned = redact_secrets(None, "info", event)
    assert cleaned["event"] == "connecting to postgresql://app:***@db/ledger"
    assert cleaned["api_token"] == "***"
    assert cleaned["nested"] == {"password": "***", "url": "redis://:***@cache:6379/0", "n": 1}


def test_job_logs_are_json_with_job_context_and_no_secrets(
    served_sqlite: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    app = served_sqlite.app
    configure_logging("INFO", "json")
    dsn = "mysql://svc:hunter2@db.internal/app"
    chatty = app.client.enqueue([app.client.build("admin.chatty", [dsn])])[0].job_id
    boom = app.client.enqueue([app.client.build("admin.boom", ["disk full"])])[0].job_id
    with running_worker(app, queues=("default", "mail"), poll_interval_seconds=0.05):
        wait_until(
            lambda: (
                app.client.get(boom).state is JobState.DEAD
                and app.client.get(chatty).state is JobState.SUCCEEDED
            ),
            what="jobs finished",
        )
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    hello = next(line for line in lines if line["event"] == "task says hello")
    assert hello["job_id"] == chatty and hello["task"] == "admin.chatty"
    assert hello["queue"] == "default" and hello["attempt"] == 1
    assert hello["dsn"] == "mysql://svc:***@db.internal/app" and hello["api_token"] == "***"
    failed = next(line for line in lines if line["event"] == "job dead")  # max_attempts 1
    assert failed["job_id"] == boom and "disk full" in failed["error"]
    assert failed["level"] == "WARNING" and failed["component"] == "cli"  # in-process
    assert any(line["event"] == "worker starting" and line["worker_id"] for line in lines)
    assert "hunter2" not in err
