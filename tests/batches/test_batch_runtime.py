"""Batch items and batches of jobs end to end with an in-process worker, on every backend:
resume after a failed attempt, exactly-once item effects, callbacks that fire once, and
``batch show`` / ``batch retry-failed`` / ``job show`` from the CLI."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from ledgerq import JobContext, JobState, LedgerQ
from ledgerq.cli.main import main
from ledgerq.core.batches import BatchEvent
from tests.helpers import running_worker, wait_until
from tests.redis_server import RedisServer

S = JobState
FAST = {"poll_interval_seconds": 0.05, "concurrency": 4}
KEYS = [f"k{i:03d}" for i in range(250)]

effects = sa.Table(
    "walk_effects",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("item_key", sa.String(20), nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
)


@pytest.fixture
def app(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[LedgerQ]:
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    application = LedgerQ(database_url=database_url)
    yield application
    application.close()


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    capsys.readouterr()
    assert main(["--json", *argv]) == 0
    value = json.loads(capsys.readouterr().out)
    assert isinstance(value, dict)
    return value


def test_a_retry_skips_the_items_the_failed_attempt_finished(
    app: LedgerQ, capsys: pytest.CaptureFixture[str]
) -> None:
    handed: dict[int, list[str]] = {}

    @app.task(max_attempts=2, retry_backoff=0.05)
    def walk(ctx: JobContext, fail_at: str) -> int:
        for key in ctx.items(KEYS):
            handed.setdefault(ctx.attempt, []).append(key)
            if ctx.attempt == 1 and key == fail_at:
                raise RuntimeError(f"failed at {key}")
        return len(KEYS)

    job_id = walk.enqueue("k123").job_id
    with running_worker(app, **FAST):
        wait_until(lambda: app.jobs.get(job_id).state is S.SUCCEEDED, what="walk done")
    # Items finished before the failure were recorded (buffered, flushed when the loop was
    # left); the failing item and the rest ran on the retry, and nothing else did.
    assert handed == {1: KEYS[:124], 2: KEYS[123:]}
    shown = cli_json(capsys, "job", "show", str(job_id))
    items = shown["items"]
    assert isinstance(items, dict)
    assert (items["total"], items["done"], items["done_this_attempt"]) == (250, 250, 127)
    capsys.readouterr()
    assert main(["job", "show", str(job_id)]) == 0
    assert "250/250 (100%)" in capsys.readouterr().out


def test_item_effects_written_with_item_done_happen_exactly_once(app: LedgerQ) -> None:
    engine = app.parts.store.engine
    effects.metadata.create_all(engine)

    @app.task(max_attempts=2, retry_backoff=0.05)
    def charge(ctx: JobContext, fail_at: str) -> None:
        for key in ctx.items(KEYS):
            with engine.begin() as conn:
                conn.execute(effects.insert().values(item_key=key, attempt=ctx.attempt))
                ctx.item_done(key, result={"charged": key}, tx=conn)
                if ctx.attempt == 1 and key == fail_at:
                    raise RuntimeError("crash after the effect, before the commit")

    job_id = charge.enqueue("k200").job_id
    with running_worker(app, **FAST):
        wait_until(lambda: app.jobs.get(job_id).state is S.SUCCEEDED, what="charge done")
    with engine.connect() as conn:
        rows = conn.execute(sa.select(effects.c.item_key, effects.c.attempt)).all()
    assert sorted(k for k, _ in rows) == KEYS  # each effect exactly once
    assert Counter(a for _, a in rows) == {1: 200, 2: 50}
    assert app.parts.items.item_progress(job_id).done == 250


def test_batch_callbacks_fire_once_and_retry_failed_reruns_only_the_failed(
    app: LedgerQ, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[tuple[int, int]] = []
    fired: list[tuple[str, int]] = []

    @app.task(max_attempts=1)
    def member(ctx: JobContext, n: int) -> int:
        runs.append((n, ctx.attempt))
        if n % 3 == 0 and ctx.attempt == 1:
            raise ValueError(f"member {n} fails on its first attempt")
        return n

    def callback(event: str):  # type: ignore[no-untyped-def]
        @app.task(name=f"on_{event}")
        def handler(ctx: JobContext, batch_id: int) -> None:
            fired.append((event, batch_id))

        return handler

    batch = app.batch(
        [(member, (n,)) for n in range(1, 7)],
        on_success=callback("success"),
        on_failure=callback("failure"),
        on_complete=callback("complete"),
    )
    assert batch.id is not None and len(batch.job_ids) == 6
    with running_worker(app, **FAST):
        wait_until(lambda: len(fired) == 2, what="failure and complete callbacks")
        shown = cli_json(capsys, "batch", "show", str(batch.id))
        assert shown["counts"] == {**{s.value: 0 for s in S}, "succeeded": 4, "dead": 2}
        retried = cli_json(capsys, "batch", "retry-failed", str(batch.id))
        assert sorted(retried["retried"]) == sorted(  # type: ignore[arg-type]
            job_id for job_id, n in zip(batch.job_ids, range(1, 7), strict=True) if n % 3 == 0
        )
        wait_until(lambda: len(fired) == 3, what="success callback")
        wait_until(lambda: app.batches.get(batch.id).finished == 6, what="all finished")  # type: ignore[arg-type]
    assert sorted(fired) == [("complete", batch.id), ("failure", batch.id), ("success", batch.id)]
    # The retry reran exactly the two failed members.
    assert sorted(runs) == sorted([(n, 1) for n in range(1, 7)] + [(3, 2), (6, 2)])
    status = app.batches.get(batch.id)
    assert all(status.fired_at[event] is not None for event in BatchEvent)
    capsys.readouterr()
    assert main(["batch", "show", str(batch.id)]) == 0
    assert "6/6 (100%)" in capsys.readouterr().out


def test_batch_builder_and_bad_batch_input(
    app: LedgerQ, capsys: pytest.CaptureFixture[str]
) -> None:
    @app.task
    def noop(ctx: JobContext, n: int) -> None:
        """Nothing."""

    @app.task
    def done(ctx: JobContext, batch_id: int) -> None:
        """A callback: called with the batch's id only."""

    with app.batch(on_complete=done) as batch:
        batch.add(noop, 1).add(noop, 2, priority=5)
    assert batch.id is not None and app.batches.get(batch.id).size == 2
    assert app.jobs.get(batch.job_ids[1]).priority == 5
    capsys.readouterr()
    assert main(["batch", "show", "999999"]) == 1
    assert capsys.readouterr().err.strip() == "error: no batch with id 999999"
    assert main(["batch", "retry-failed", "0"]) == 2


def test_batch_callback_jobs_are_announced_on_redis(
    database_url: str, redis_server: RedisServer
) -> None:
    """A callback queued by a member's completion is pushed once that commits: a worker on the
    Redis driver runs it at once, not after its 60 s poll or the reconciler's re-send."""
    application = LedgerQ(database_url=database_url, redis_url=redis_server.url, namespace="bcb")
    called: list[int] = []

    @application.task(name="member")
    def member(ctx: JobContext) -> None:
        return None

    @application.task(name="after")
    def after(ctx: JobContext, batch_id: int) -> None:
        called.append(batch_id)

    try:
        with running_worker(
            application, concurrency=2, poll_interval_seconds=60.0, reconcile=False
        ):
            batch = application.batch([(member, ()), (member, ())], on_complete=after)
            wait_until(lambda: called == [batch.id], timeout=10, what="the callback ran")
    finally:
        application.close()
