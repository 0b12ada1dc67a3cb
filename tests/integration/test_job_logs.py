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


def test_every_job_has_a_start_and_an_end_line(app: LedgerQ) -> None:
    attempts: list[int] = []

    @app.task(name="flaky", max_attempts=3, retry_backoff=0.01)
    def flaky(ctx: JobContext, n: int) -> int:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first run fails")
        return n

    job_id = flaky.enqueue(4).job_id
    with capture_logs() as logs:
        app.worker(queues=("default",), burst=True, concurrency=1).run()
    assert app.jobs.get(job_id).state is JobState.SUCCEEDED
    lines = [e for e in logs if e.get("job_id") == job_id and e["event"].startswith("job ")]
    assert [(e["event"], e["attempt"]) for e in lines] == [
        ("job started", 1),
        ("job attempt failed; it will retry", 1),
        ("job started", 2),
        ("job succeeded", 2),
    ]
    for line in lines:
        assert line["task"] == "flaky" and line["queue"] == "default"
        assert line["log_level"] == "info"
    ends = [e for e in lines if e["event"] != "job started"]
    assert [e["outcome"] for e in ends] == ["failed", "succeeded"]
    assert all(e["duration_ms"] >= 0 for e in ends)
    assert ends[0]["error"] == "RuntimeError: first run fails"


def test_log_jobs_off_keeps_only_what_went_wrong(database_url: str) -> None:
    application = LedgerQ(database_url=database_url, poll_interval=0.05, log_jobs=False)
    try:

        @application.task(name="fine")
        def fine(ctx: JobContext) -> None:
            return None

        @application.task(name="doomed", max_attempts=1)
        def doomed(ctx: JobContext) -> None:
            raise ValueError("never")

        fine_id = fine.enqueue().job_id
        doomed_id = doomed.enqueue().job_id
        with capture_logs() as logs:
            application.worker(queues=("default",), burst=True, concurrency=1).run()
        assert application.jobs.get(fine_id).state is JobState.SUCCEEDED
        job_lines = [e for e in logs if e.get("job_id") in (fine_id, doomed_id)]
        assert [(e["event"], e["job_id"]) for e in job_lines] == [("job dead", doomed_id)]
        assert job_lines[0]["log_level"] == "warning"
    finally:
        application.close()


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_above_info_the_start_and_success_lines_are_not_built(database_url: str) -> None:
    # capture_logs sees every call whatever the level: only the wiring can keep them away.
    quiet = LedgerQ(database_url=database_url, poll_interval=0.05, log_level="WARNING")
    try:

        @quiet.task(name="fine")
        def fine(ctx: JobContext) -> None: ...

        @quiet.task(name="boom", max_attempts=1)
        def boom(ctx: JobContext) -> None:
            raise ValueError("no luck")

        fine.enqueue()
        boom.enqueue()
        with capture_logs() as logs:
            quiet.worker(queues=("default",), burst=True, concurrency=1).run()
        events = [e["event"] for e in logs]
        assert "job started" not in events and "job succeeded" not in events
        assert "job dead" in events  # a failure's line is still written
    finally:
        quiet.close()
