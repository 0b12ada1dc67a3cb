"""The outcome of an attempt that raised, decided without a database: the task's
``retry_on`` / ``dont_retry_on`` and the handler's own ``Retry``, ``Cancel`` and ``Discard``."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ledgerq import Cancel, Discard, Job, JobState, Retry, RetryPolicy
from ledgerq.runtime import outcomes

POLICY = RetryPolicy(
    base_seconds=2.0, jitter=0.0, retry_on=(OSError,), dont_retry_on=(TimeoutError,)
)


def job(attempt: int, max_attempts: int = 3) -> Job:
    now = datetime.now(UTC)
    return Job(1, "q", "t", "[]", 0, JobState.RUNNING, attempt, max_attempts, now, now)


def test_the_rules_pick_retry_or_dead() -> None:
    retried = outcomes.raised(job(1), POLICY, ConnectionError("reset"))  # an OSError
    assert (retried.state, retried.retry_delay_seconds) == (JobState.FAILED, 2.0)
    for exc in (ValueError("no"), TimeoutError("slow")):  # not in retry_on / in dont_retry_on
        dead = outcomes.raised(job(1), POLICY, exc)
        assert dead.state is JobState.DEAD
        assert json.loads(dead.error_json or "{}")["retryable"] is False
    assert outcomes.raised(job(3), POLICY, ConnectionError()).state is JobState.DEAD


def test_the_handler_asks_for_its_outcome() -> None:
    later = outcomes.raised(job(1), POLICY, Retry(delay=30, reason="not yet"))
    assert (later.state, later.retry_delay_seconds) == (JobState.FAILED, 30.0)
    backoff = outcomes.raised(job(2), POLICY, Retry())
    assert (backoff.state, backoff.retry_delay_seconds) == (JobState.FAILED, 4.0)
    spent = outcomes.raised(job(3), POLICY, Retry(delay=1))
    assert spent.state is JobState.DEAD
    assert json.loads(spent.error_json or "{}")["kind"] == "retry"
    cancelled = outcomes.raised(job(1), POLICY, Cancel("gone"))
    assert cancelled.state is JobState.CANCELLED
    assert json.loads(cancelled.error_json or "{}")["reason"] == "gone"
    discarded = outcomes.raised(job(1, max_attempts=9), POLICY, Discard("never"))
    assert discarded.state is JobState.DEAD
    assert json.loads(discarded.error_json or "{}")["kind"] == "discarded"
