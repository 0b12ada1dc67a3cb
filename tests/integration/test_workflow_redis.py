"""The workflow event feed with Redis: a subscriber is woken by pub/sub as each step completes
(long before its poll interval), receives every event, and the steps a completion queued are
announced on the transport, on every backend."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from ledgerq import JobContext, LedgerQ
from ledgerq.core import workflow as wf
from tests.helpers import running_worker, wait_until
from tests.redis_server import RedisServer

#: The feed would poll only this often: events arriving sooner came through Redis.
POLL_SECONDS = 60.0


@pytest.fixture
def app(database_url: str, redis_server: RedisServer) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, redis_url=redis_server.url, namespace="wf")
    yield application
    application.close()


def test_subscribers_are_woken_by_redis_for_every_step_event(
    app: LedgerQ, redis_server: RedisServer
) -> None:
    @app.task(name="step")
    def step(ctx: JobContext, n: int, upstream: dict[str, int] | None = None) -> int:
        return n + sum((upstream or {}).values())

    flow = app.workflow("chain")
    first = flow.step(step.s(1), name="first")
    second = flow.step(step.s(10), after=[first], name="second")
    flow.step(step.s(100), after=[second], name="third")
    workflow_id = flow.enqueue()

    received: list[tuple[float, wf.WorkflowEvent]] = []
    redis = redis_server.client()
    with app.workflow_events(workflow_id, poll_interval=POLL_SECONDS) as feed:
        feed.subscribe(lambda event: received.append((time.monotonic(), event)))
        wait_until(
            lambda: redis.pubsub_numsub("wf:0:workflow-events")[0][1] == 1,
            what="the feed subscribed to the workflow channel",
        )
        started = time.monotonic()
        with running_worker(app, driver="redis", poll_interval_seconds=0.05, reconcile=False):
            wait_until(lambda: len(received) == 4, timeout=30, what="every event received")
    assert [(e.type, e.step, e.result) for _, e in received] == [
        (wf.STEP_COMPLETE, "first", 1),
        (wf.STEP_COMPLETE, "second", 11),
        (wf.STEP_COMPLETE, "third", 111),
        (wf.WORKFLOW_FINISHED, None, None),
    ]
    assert max(at for at, _ in received) - started < POLL_SECONDS / 2
    # The steps queued by completions were announced on Redis (the worker drove on ids).
    assert app.workflows.get(workflow_id).state is wf.WorkflowState.SUCCEEDED
