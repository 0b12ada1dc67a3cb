"""Logs a person can follow: a job that dies says so as a WARNING (a retry stays INFO), and
scheduler ticks are ISO times."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from structlog.testing import capture_logs

from ledgerq import JobContext, LedgerQ
from ledgerq.core.states import JobState
from tests.helpers import wait_until


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, poll_interval=0.05)
    yield application
    application.close()


def test_a_dead_job_is_a_warning_and_a_retry_is_info(app: LedgerQ) -> None:
    @app.task(name="boom", max_attempts=2, retry_backoff=0.01)
    def boom(ctx: JobContext) -> None:
        raise ValueError("no luck")

    job_id = boom.enqueue().job_id
    with capture_logs() as logs:
        app.worker(queues=("default",), burst=True, concurrency=1).run()
    assert app.jobs.get(job_id).state is JobState.DEAD
    failures = [e for e in logs if "no luck" in str(e.get("error", ""))]
    assert [e["log_level"] for e in failures] == ["info", "warning"]
    assert failures[-1]["event"] == "job dead"


def test_scheduler_ticks_log_as_iso_times(app: LedgerQ) -> None:
    @app.periodic(cron="* * * * * *", name="every-second")
    def pulse(ctx: JobContext) -> None:
        return None

    scheduler = app.scheduler()
    scheduler.declare(list(app.schedules.values()))
    with capture_logs() as logs:
        wait_until(
            lambda: scheduler.tick() is not None and any(e["event"] == "tick fired" for e in logs),
            what="a tick fired",
        )
    fired = next(e for e in logs if e["event"] == "tick fired")
    assert isinstance(fired["tick"], str)
    assert datetime.fromisoformat(fired["tick"]).tzinfo is not None
