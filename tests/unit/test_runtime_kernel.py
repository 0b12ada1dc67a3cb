"""The runtime kernel: the periodic service loop, the service group's order and the order of
the job middleware's hooks."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import structlog

from ledgerq.core import errors
from ledgerq.core.job import Job
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.core.tasks import TaskSpec
from ledgerq.runtime import outcomes
from ledgerq.runtime.context import JobContext
from ledgerq.runtime.middleware import Hooks, JobMiddleware
from ledgerq.runtime.service import PeriodicService, ServiceGroup, Steps
from tests.helpers import wait_until


class Ticker(PeriodicService):
    """Counts its ticks; the first ``failing`` ticks raise a store error."""

    thread_name = "test-ticker"
    logger = structlog.get_logger("test.ticker")
    failure_message = "tick failed"

    def __init__(self, interval: float, failing: int = 0) -> None:
        super().__init__(interval)
        self.ticks = 0
        self._failing = failing

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks <= self._failing:
            raise errors.StoreError("ledger down")


def test_a_store_error_is_counted_and_the_loop_goes_on() -> None:
    ticker = Ticker(0.01, failing=2)
    ticker.start()
    try:
        wait_until(lambda: ticker.ticks >= 4, timeout=5, what="ticks after the failures")
    finally:
        ticker.stop()
    assert ticker.failures == 2


def test_wake_cuts_the_wait_short_and_stop_ends_the_thread() -> None:
    ticker = Ticker(60.0)
    ticker.start()
    ticker.wake()
    wait_until(lambda: ticker.ticks == 1, timeout=5, what="a woken tick")
    began = time.monotonic()
    ticker.stop()
    assert time.monotonic() - began < 1.0
    assert not ticker._thread.is_alive()
    assert ticker.ticks == 1


def test_a_group_stops_in_reverse_order_only_what_it_started() -> None:
    seen: list[str] = []

    def step(name: str) -> Steps:
        return Steps(lambda: seen.append(f"start {name}"), lambda: seen.append(f"stop {name}"))

    group = ServiceGroup([step("a"), step("b"), step("c")])
    group.start()
    group.stop()
    group.stop()  # stopped already: nothing more
    assert seen == ["start a", "start b", "start c", "stop c", "stop b", "stop a"]


class Recording(JobMiddleware):
    """Appends each hook call to a shared list; ``admits`` is what ``before_start`` says."""

    def __init__(self, name: str, calls: list[str], admits: bool = True) -> None:
        self.name = name
        self.calls = calls
        self.admits = admits

    def before_start(self, ctx: JobContext, spec: TaskSpec | None) -> bool:
        self.calls.append(f"{self.name}.before_start")
        return self.admits

    def after_written(self, completion: Completion, applied: bool, ctx: Any) -> None:
        self.calls.append(f"{self.name}.after_written")


def test_hooks_run_in_order_before_and_in_reverse_after() -> None:
    calls: list[str] = []
    silent = JobMiddleware()  # overrides nothing: none of its hooks is called
    hooks = Hooks([Recording("gate", calls), silent, Recording("metrics", calls)])
    assert hooks.after_dropped == ()
    now = datetime.now(UTC)
    job = Job(1, "q", "t", "[]", 0, JobState.RUNNING, 1, 3, now, now)
    ctx = JobContext(job)
    for before in hooks.before_start:
        before(ctx, None)
    completion = outcomes.succeeded(job, None, 0.0)
    for after in hooks.after_written:
        after(completion, True, ctx)
    assert calls == [
        "gate.before_start",
        "metrics.before_start",
        "metrics.after_written",
        "gate.after_written",
    ]


def test_a_service_thread_is_named_and_a_daemon() -> None:
    ticker = Ticker(60.0)
    ticker.start()
    try:
        names = {t.name: t.daemon for t in threading.enumerate()}
        assert names.get("test-ticker") is True
    finally:
        ticker.stop()
