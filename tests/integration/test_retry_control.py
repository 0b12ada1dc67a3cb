"""Control over retries (issue 25, item 5): ``retry_on`` / ``dont_retry_on`` decide which
exceptions retry, and a handler decides its own outcome by raising ``Retry``, ``Cancel`` or
``Discard``. Each rule on every database: the job's final state, its attempts and the error
it keeps."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import ledgerq
from ledgerq import Cancel, ConfigError, Discard, Job, JobContext, LedgerQ, Retry, RetryPolicy
from ledgerq.cli.output import job_dict
from ledgerq.core.states import FINISHED, JobState
from ledgerq.store.tables import job_assignments
from tests.helpers import running_worker, wait_until


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, poll_interval=0.05)
    yield application
    application.close()


def finished(app: LedgerQ, job_id: int, *, with_worker: bool = True) -> Job:
    """Run a worker until job ``job_id`` is finished; return it."""

    def done() -> Job | None:
        job = app.jobs.get(job_id)
        return job if job.state in FINISHED else None

    if not with_worker:
        job = wait_until(done, what=f"job {job_id} finished")
    else:
        with running_worker(app, queues=("default",)):
            job = wait_until(done, what=f"job {job_id} finished")
    assert job is not None
    return job


def error_of(job: Job) -> dict[str, Any]:
    assert job.error_json is not None
    error: dict[str, Any] = json.loads(job.error_json)
    return error


class Flaky(ConnectionError):
    """A subclass: ``retry_on=(ConnectionError,)`` covers it."""


def test_by_default_every_exception_retries_until_attempts_are_spent(app: LedgerQ) -> None:
    @app.task(name="always_fails", max_attempts=3, retry_backoff=0.01)
    def always_fails(ctx: JobContext) -> None:
        raise ValueError("bad value")

    job = finished(app, always_fails.enqueue().job_id)
    assert (job.state, job.attempt) == (JobState.DEAD, 3)
    error = error_of(job)
    assert (error["kind"], error["type"], error["attempt"]) == ("exception", "ValueError", 3)
    assert "retryable" not in error


def test_retry_on_retries_only_those_classes_and_their_subclasses(app: LedgerQ) -> None:
    runs: dict[str, int] = {}

    @app.task(name="network", max_attempts=3, retry_backoff=0.01, retry_on=(ConnectionError,))
    def network(ctx: JobContext, what: str) -> str:
        runs[what] = runs.get(what, 0) + 1
        if what == "flaky" and runs[what] < 3:
            raise Flaky("connection reset")
        if what == "broken":
            raise ValueError("not a network problem")
        return "ok"

    flaky = network.enqueue("flaky").job_id
    broken = network.enqueue("broken").job_id
    with running_worker(app, queues=("default",)):
        done = finished(app, flaky, with_worker=False)
        dead = finished(app, broken, with_worker=False)
    # The subclass of ConnectionError retried twice, then succeeded on its third run.
    assert (done.state, done.attempt, runs["flaky"]) == (JobState.SUCCEEDED, 3, 3)
    # The ValueError is not in retry_on: dead on its first attempt, 2 attempts unused.
    assert (dead.state, dead.attempt, runs["broken"]) == (JobState.DEAD, 1, 1)
    error = error_of(dead)
    assert (error["kind"], error["type"], error["retryable"]) == ("exception", "ValueError", False)
    assert "not a network problem" in error["message"]


def test_dont_retry_on_makes_the_job_dead_at_once_and_wins_over_retry_on(app: LedgerQ) -> None:
    @app.task(
        name="strict",
        max_attempts=5,
        retry_backoff=0.01,
        retry_on=Exception,
        dont_retry_on=(KeyError, PermissionError),
    )
    def strict(ctx: JobContext, kind: str) -> None:
        if kind == "key":
            raise KeyError("missing")
        if kind == "permission":
            raise PermissionError("denied")  # an OSError, yet in dont_retry_on
        raise RuntimeError("transient")

    ids = {kind: strict.enqueue(kind).job_id for kind in ("key", "permission", "other")}
    with running_worker(app, queues=("default",)):
        jobs = {kind: finished(app, job_id, with_worker=False) for kind, job_id in ids.items()}
    for kind in ("key", "permission"):
        assert (jobs[kind].state, jobs[kind].attempt) == (JobState.DEAD, 1), kind
        assert error_of(jobs[kind])["retryable"] is False
    assert (jobs["other"].state, jobs["other"].attempt) == (JobState.DEAD, 5)
    assert error_of(jobs["other"])["type"] == "RuntimeError"


def test_raising_retry_runs_again_after_its_delay_and_counts_as_an_attempt(
    app: LedgerQ,
) -> None:
    starts: list[float] = []

    @app.task(name="poll_export", max_attempts=4, retry_on=(ConnectionError,))
    def poll_export(ctx: JobContext) -> int:
        starts.append(time.monotonic())
        if ctx.attempt < 3:
            raise Retry(delay=0.4, reason="export not ready")
        return ctx.attempt

    job = finished(app, poll_export.enqueue().job_id)
    assert (job.state, job.attempt, len(starts)) == (JobState.SUCCEEDED, 3, 3)
    # Each run waited out the delay asked for (the retry_on rule does not apply to Retry).
    assert all(b - a >= 0.35 for a, b in itertools.pairwise(starts))
    assert json.loads(job.result_json or "null") == 3


def test_raising_retry_with_no_attempt_left_makes_the_job_dead(app: LedgerQ) -> None:
    @app.task(name="never_ready", max_attempts=2)
    def never_ready(ctx: JobContext) -> None:
        raise Retry(delay=0.05, reason="still not ready")

    job = finished(app, never_ready.enqueue().job_id)
    assert (job.state, job.attempt) == (JobState.DEAD, 2)
    error = error_of(job)
    assert (error["kind"], error["reason"], error["attempt"]) == ("retry", "still not ready", 2)
    assert error["delay_seconds"] == 0.05
    assert "traceback" not in error


def test_raising_cancel_finishes_the_job_cancelled(app: LedgerQ) -> None:
    @app.task(name="obsolete", max_attempts=5)
    async def obsolete(ctx: JobContext, order_id: int) -> None:
        raise Cancel(f"order {order_id} was withdrawn")

    job = finished(app, obsolete.enqueue(7).job_id)
    assert (job.state, job.attempt) == (JobState.CANCELLED, 1)
    assert job.finished_at is not None
    error = error_of(job)
    assert (error["kind"], error["reason"]) == ("cancelled", "order 7 was withdrawn")
    assert error["message"] == "cancelled: order 7 was withdrawn"
    # The attempt's history ends cancelled too.
    history = sa.select(job_assignments.c.outcome).where(job_assignments.c.job_id == job.id)
    with app.engine.connect() as conn:
        assert conn.execute(history).scalars().all() == ["cancelled"]


def test_raising_discard_makes_the_job_dead_whatever_attempts_remain(app: LedgerQ) -> None:
    @app.task(name="malformed", max_attempts=10, retry_backoff=0.01)
    def malformed(ctx: JobContext) -> None:
        raise Discard("payload can never be parsed")

    job = finished(app, malformed.enqueue().job_id)
    assert (job.state, job.attempt, job.max_attempts) == (JobState.DEAD, 1, 10)
    error = error_of(job)
    assert (error["kind"], error["reason"]) == ("discarded", "payload can never be parsed")


def test_outcomes_are_exported_from_the_package() -> None:
    assert {"Retry", "Cancel", "Discard"} <= set(ledgerq.__all__)
    assert ledgerq.Retry is Retry


@pytest.mark.parametrize(
    "options",
    [
        {"retry_on": ("ConnectionError",)},
        {"retry_on": ConnectionError()},
        {"dont_retry_on": (ValueError, int)},
        {"dont_retry_on": 3},
    ],
    ids=["a name", "an instance", "not an exception", "not a class"],
)
def test_registration_refuses_what_is_not_an_exception_class(
    make_database_url: Callable[[str], str], options: dict[str, Any]
) -> None:
    app = LedgerQ(database_url=make_database_url("sqlite"))
    try:
        with pytest.raises(ConfigError, match="exception classes"):
            app.task(name="t", **options)(lambda ctx: None)
        assert "t" not in app.registry
    finally:
        app.close()


def test_a_retry_policy_carries_the_rules_and_the_keywords_replace_them() -> None:
    policy = RetryPolicy(retry_on=ConnectionError, dont_retry_on=(Flaky,))  # type: ignore[arg-type]
    assert policy.retry_on == (ConnectionError,)
    assert policy.retries(ConnectionError()) and not policy.retries(Flaky())
    assert not policy.retries(ValueError())
    assert RetryPolicy().retries(ValueError())
    with pytest.raises(ConfigError):
        RetryPolicy(retry_on=(object,))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="negative"):
        Retry(delay=-1)
    with pytest.raises(ValueError, match="number"):
        Retry(delay=float("nan"))


def test_postponements_by_a_limit_are_not_shown_as_attempts(app: LedgerQ) -> None:
    """A job a concurrency limit postponed keeps its full budget of runs, and ``ctx.attempt``,
    the stored error and what the CLI and the API show count its real runs only."""
    release = threading.Event()
    seen: dict[str, list[int]] = {"hold": [], "fail": []}

    @app.task(name="single", max_attempts=2, retry_backoff=0.01, concurrency_limit=1)
    def single(ctx: JobContext, what: str) -> None:
        seen[what].append(ctx.attempt)
        if what == "hold":
            release.wait(20)
            return
        raise ValueError("always")

    holder = single.enqueue("hold").job_id
    with running_worker(app, queues=("default",), concurrency=2):
        wait_until(lambda: seen["hold"], what="the holder runs")
        failing = single.enqueue("fail").job_id
        # The slot is taken: the second job is claimed and postponed, without running.
        wait_until(lambda: app.jobs.get(failing).postponed >= 1, what="a postponement")
        waiting = app.jobs.get(failing)
        assert (waiting.runs, waiting.max_runs) == (0, 2)
        assert waiting.attempt == waiting.postponed  # every claim so far was a postponement
        assert job_dict(waiting)["attempt"] == 0
        release.set()
        dead = finished(app, failing, with_worker=False)
    assert seen == {"hold": [1], "fail": [1, 2]}
    assert app.jobs.get(holder).runs == 1
    assert dead.state is JobState.DEAD
    assert (dead.runs, dead.max_runs) == (2, 2)
    assert dead.attempt == 2 + dead.postponed and dead.max_attempts == 2 + dead.postponed
    assert error_of(dead)["attempt"] == 2
    shown = job_dict(dead)
    assert (shown["attempt"], shown["max_attempts"], shown["postponed"]) == (
        2,
        2,
        dead.postponed,
    )
