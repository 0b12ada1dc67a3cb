"""Lifecycle hooks (``app.add_hooks``): the documented order, exactly one "after" hook per
attempt with the exception object, hooks that raise change nothing, and the example of
docs/hooks.md runs as written."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledgerq import Cancel, JobContext, JobHooks, LedgerQ
from ledgerq.core import errors
from ledgerq.core.states import JobState

DOC = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=database_url, poll_interval=0.05)
    yield application
    application.close()


class Journal(JobHooks):
    """Writes what it is told into a shared list, tagged with its name."""

    def __init__(self, name: str, seen: list[tuple[object, ...]]) -> None:
        self.name = name
        self.seen = seen

    def before_start(self, ctx: JobContext) -> None:
        self.seen.append((self.name, "start", ctx.job.task, ctx.attempt))

    def after_success(self, ctx: JobContext, result: object) -> None:
        self.seen.append((self.name, "success", ctx.job.task, result))

    def after_failure(self, ctx: JobContext, error: BaseException, will_retry: bool) -> None:
        self.seen.append((self.name, "failure", ctx.job.task, repr(error), will_retry))

    def when_dead(self, ctx: JobContext, error: BaseException) -> None:
        self.seen.append((self.name, "dead", ctx.job.task, repr(error)))


class Broken(JobHooks):
    def before_start(self, ctx: JobContext) -> None:
        raise RuntimeError("a hook's own bug")

    def after_success(self, ctx: JobContext, result: object) -> None:
        raise RuntimeError("a hook's own bug")


def run_burst(app: LedgerQ) -> None:
    app.worker(queues=("default",), burst=True, concurrency=1).run()


def test_hooks_run_in_order_once_per_attempt(app: LedgerQ) -> None:
    seen: list[tuple[object, ...]] = []
    app.add_hooks(Journal("outer", seen))
    app.add_hooks(Broken())
    app.add_hooks(Journal("inner", seen))

    @app.task(name="double")
    def double(ctx: JobContext, n: int) -> int:
        return 2 * n

    @app.task(name="flaky", max_attempts=2, retry_backoff=0.01)
    def flaky(ctx: JobContext) -> None:
        raise ValueError(f"attempt {ctx.attempt}")

    @app.task(name="withdrawn")
    def withdrawn(ctx: JobContext) -> None:
        raise Cancel("withdrawn")

    ids = [double.enqueue(21).job_id, flaky.enqueue().job_id, withdrawn.enqueue().job_id]
    run_burst(app)
    states = [app.jobs.get(i).state for i in ids]
    assert states == [
        JobState.SUCCEEDED,
        JobState.DEAD,
        JobState.CANCELLED,
    ]  # Broken changed nothing
    assert app.jobs.get(ids[0]).result_json == "42"

    def of(task: str) -> list[tuple[object, ...]]:
        return [entry[:2] + entry[3:] for entry in seen if entry[2] == task]

    assert of("double") == [
        ("outer", "start", 1),
        ("inner", "start", 1),
        ("inner", "success", 42),
        ("outer", "success", 42),
    ]
    assert of("flaky") == [
        ("outer", "start", 1),
        ("inner", "start", 1),
        ("inner", "failure", "ValueError('attempt 1')", True),
        ("outer", "failure", "ValueError('attempt 1')", True),
        ("outer", "start", 2),
        ("inner", "start", 2),
        ("inner", "dead", "ValueError('attempt 2')"),
        ("outer", "dead", "ValueError('attempt 2')"),
    ]
    assert [entry[1] for entry in of("withdrawn")][-2:] == ["failure", "failure"]
    assert of("withdrawn")[-1][-1] is False  # cancelled: it will not run again


def test_add_hooks_refuses_what_is_not_hooks(app: LedgerQ) -> None:
    with pytest.raises(errors.ConfigError, match="JobHooks"):
        app.add_hooks(lambda ctx: None)  # type: ignore[type-var]


def test_the_docs_example_runs_as_written(app: LedgerQ) -> None:
    (example,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    namespace: dict[str, object] = {"app": app}
    exec(compile(example, str(DOC), "exec"), namespace)

    @app.task(name="export", max_attempts=1)
    def export(ctx: JobContext, report: int) -> None:
        raise PermissionError(f"report {report} is locked")

    @app.task(name="ping")
    def ping(ctx: JobContext) -> str:
        return "pong"

    dead_id = export.enqueue(7).job_id
    ping.enqueue()
    run_burst(app)
    reporter, tracer = namespace["reporter"], namespace["tracer"]
    assert reporter.captured == [  # type: ignore[attr-defined]
        (
            "PermissionError('report 7 is locked')",
            {"task": "export", "queue": "default", "job_id": dead_id, "attempt": 1},
        )
    ]
    spans = {span["name"]: span for span in tracer.finished}  # type: ignore[attr-defined]
    assert spans["export"]["status"] == "error" and spans["ping"]["status"] == "ok"
    assert spans["ping"]["attributes"]["job.attempt"] == 1 and spans["ping"]["seconds"] >= 0
