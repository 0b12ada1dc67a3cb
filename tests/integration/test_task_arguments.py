"""Arguments are bound to the handler when a job is enqueued, never when it dies; job options
have a home of their own (``task.options(...)``); registration refuses handlers that could
never run. Every refusal stores nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledgerq import JobContext, LedgerQ
from ledgerq.cli.main import main
from ledgerq.core import errors
from ledgerq.core.states import JobState
from tests.helpers import running_worker, wait_until


@pytest.fixture
def app(make_database_url: Callable[[str], str]) -> Iterator[LedgerQ]:
    application = LedgerQ(database_url=make_database_url("sqlite"), poll_interval=0.05)
    application.migrate()
    yield application
    application.close()


def test_a_call_the_handler_cannot_take_is_refused_and_nothing_stored(app: LedgerQ) -> None:
    @app.task(name="add")
    def add(ctx: JobContext, x: int, y: int) -> int:
        return x + y

    refused = {
        "an option spelled wrong": lambda: add.enqueue(1, 2, countdown=10),  # type: ignore[call-arg]
        "a missing argument": lambda: add.enqueue(1),  # type: ignore[call-arg]
        "one too many": lambda: add.enqueue(1, 2, 3),  # type: ignore[call-arg]
        "a keyword twice": lambda: add.enqueue(1, 2, x=1),  # type: ignore[call-arg]
        "many, one bad": lambda: add.enqueue_many([(1, 2), (1,)]),
    }
    for what, call in refused.items():
        with pytest.raises(errors.ArgumentsMismatch) as caught:
            call()
        assert "'add'" in str(caught.value), what
    assert "countdown" in _message(lambda: add.enqueue(1, 2, countdown=10))  # type: ignore[call-arg]
    assert "add.options(...)" in _message(lambda: add.enqueue(1, 2, countdown=10))  # type: ignore[call-arg]
    assert app.client.list() == []
    assert add.enqueue(x=1, y=2).job_id > 0


def test_an_argument_named_like_an_option_goes_to_the_handler(app: LedgerQ) -> None:
    @app.task(name="notify")
    def notify(ctx: JobContext, user_id: int, priority: str = "low") -> str:
        return f"{user_id}:{priority}"

    plain = app.client.get(notify.enqueue(7, priority="high").job_id)
    assert json.loads(plain.args_json)["kwargs"] == {"priority": "high"}
    assert plain.priority == 0

    configured = notify.options(priority=3, delay=60).enqueue(7, priority="high")
    job = app.client.get(configured.job_id)
    assert (job.priority, job.state) == (3, JobState.SCHEDULED)
    assert json.loads(job.args_json) == {"args": [7], "kwargs": {"priority": "high"}}

    # The shorthand still sets options the handler has no parameter for.
    delayed = app.client.get(notify.enqueue(8, queue="other", held=True).job_id)  # type: ignore[call-arg]
    assert (delayed.queue, delayed.state) == ("other", JobState.HELD)

    with running_worker(app, queues=("default",)):
        wait_until(lambda: app.client.get(plain.id).state is JobState.SUCCEEDED)
    assert json.loads(app.client.get(plain.id).result_json or "null") == "7:high"


def test_options_carry_the_callers_transaction(app: LedgerQ) -> None:
    @app.task(name="later")
    def later(ctx: JobContext, n: int) -> int:
        return n

    with app.engine.connect() as conn, app.transaction(conn) as tx:
        kept = later.options(tx=tx, dedupe_key="k").enqueue(1)
    with pytest.raises(RuntimeError), app.engine.connect() as conn, app.transaction(conn) as tx:
        later.options(tx=tx).enqueue(2)
        raise RuntimeError("roll back")
    assert [job.id for job in app.client.list()] == [kept.job_id]
    assert later.options(dedupe_key="k").enqueue(3).duplicate


def test_registration_refuses_a_handler_without_the_context_first(app: LedgerQ) -> None:
    def no_context(x: int, y: int) -> int:
        return x + y

    def nothing() -> None:
        return None

    def keyword_only(*, ctx: JobContext) -> None:
        return None

    for handler in (no_context, nothing, keyword_only):
        with pytest.raises(errors.ConfigError, match="takes the job context first"):
            app.task(handler)  # type: ignore[arg-type]
    assert len(app.registry) == 0

    def annotated(job_ctx: JobContext, n: int) -> int:
        return n

    def variadic(*args: object) -> int:
        return len(args)

    app.task(name="annotated")(annotated)
    app.task(name="variadic")(variadic)
    assert {spec.name for spec in app.registry} == {"annotated", "variadic"}


def test_workflow_steps_batch_callbacks_and_schedules_are_checked(app: LedgerQ) -> None:
    @app.task(name="fetch")
    def fetch(ctx: JobContext, url: str) -> str:
        return url

    @app.task(name="merge")
    def merge(ctx: JobContext, upstream: dict[str, object]) -> int:
        return len(upstream)

    @app.task(name="report")
    def report(ctx: JobContext) -> None:
        return None

    flow = app.workflow("w")
    first = flow.step(fetch.s("a"))
    flow.step(merge.s(), after=[first])  # upstream is supplied when it runs
    with pytest.raises(errors.ArgumentsMismatch):
        flow.step(fetch.s("b"), after=[first])  # fetch takes no upstream
    with pytest.raises(errors.ArgumentsMismatch):
        flow.step(fetch.s())

    with pytest.raises(errors.InvalidJob, match="batch_id"):
        app.batch(on_complete=report)
    with pytest.raises(errors.ArgumentsMismatch), app.batch() as batch:
        batch.add(fetch, "a", "b")
    with pytest.raises(errors.ConfigError, match="periodic task arguments"):
        app.periodic(cron="* * * * *", args=(1, 2))(fetch)
    assert app.client.list() == []


def test_the_cli_refuses_arguments_the_task_cannot_take(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make_database_url: Callable[[str], str],
) -> None:
    name = f"argsapp_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from ledgerq import LedgerQ

            app = LedgerQ()

            @app.task(name="tasks.send_sms")
            def send_sms(ctx, message_id):
                return message_id
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", make_database_url("sqlite"))
    monkeypatch.setenv("LEDGERQ_APP", f"{name}:app")
    try:
        assert main(["db", "migrate"]) == 0
        capsys.readouterr()
        assert main(["job", "enqueue", "tasks.send_sms", "--args", "[1,2,3]"]) != 0
        err = capsys.readouterr().err
        assert "too many positional arguments" in err
        assert "Traceback" not in err
        assert main(["--json", "job", "list"]) == 0
        assert json.loads(capsys.readouterr().out) == []
    finally:
        sys.modules.pop(name, None)


def test_a_script_registers_its_tasks_under_its_module_name(tmp_path: Path) -> None:
    (tmp_path / "pipeline.py").write_text(
        textwrap.dedent(
            """
            from ledgerq import LedgerQ

            app = LedgerQ(database_url="sqlite:///unused.db")

            @app.task
            def fetch(ctx, url):
                return url

            if __name__ == "__main__":
                print(fetch.name)
            """
        )
    )
    as_script = [sys.executable, "pipeline.py"]
    as_module = [sys.executable, "-m", "pipeline"]
    for command in (as_script, as_module):
        shown = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, check=True)
        assert shown.stdout.strip() == "pipeline.fetch", command


def _message(call: Callable[[], object]) -> str:
    try:
        call()
    except errors.ArgumentsMismatch as exc:
        return str(exc)
    raise AssertionError("the call was accepted")
