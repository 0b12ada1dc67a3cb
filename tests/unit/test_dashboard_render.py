"""The dashboard's pure renderers: the error header of every stored error shape (from the
runtime's own outcome functions), and the workflow DAG's layered layout and SVG."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from ledgerq.admin import dag_svg, pages
from ledgerq.core.job import Job
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.states import JobState
from ledgerq.core.workflow import StepState, StepView
from ledgerq.runtime import outcomes


def _job() -> Job:
    now = datetime.now(UTC)
    return Job(1, "q", "t", "{}", 0, JobState.RUNNING, 1, 1, now, now)


def _stored(error_json: str | None) -> dict[str, object]:
    assert error_json is not None
    loaded: dict[str, object] = json.loads(error_json)
    return loaded


def test_an_exception_header_names_its_type_once() -> None:
    completion = outcomes.raised(_job(), RetryPolicy(max_attempts=1), RuntimeError("boom"))
    assert completion.state is JobState.DEAD
    assert pages.error_header(_stored(completion.error_json)) == "RuntimeError: boom"


def test_an_error_without_an_exception_is_named_by_its_kind() -> None:
    unknown = outcomes.failed(
        _job(), RetryPolicy(max_attempts=1), "unknown_task", None, "task 'x' is not registered"
    )
    assert pages.error_header(_stored(unknown.error_json)) == (
        "unknown task: task 'x' is not registered"
    )
    buried = outcomes.buried(_job(), "unknown_task", "no worker knows task 'x'")
    assert pages.error_header(_stored(buried.error_json)) == (
        "unknown task: no worker knows task 'x'"
    )
    assert pages.error_header({"kind": "timeout", "message": ""}) == "timeout"
    assert pages.error_header({"message": "plain"}) == "plain"
    assert pages.error_header({}) == "error"


def _step(name: str, *deps: str, state: StepState = StepState.WAITING, **kw: object) -> StepView:
    return StepView(name, "t", deps, state, kw.pop("job_id", None), **kw)  # type: ignore[arg-type]


def test_steps_are_laid_out_in_layers_of_their_longest_dependency_path() -> None:
    steps = [
        _step("extract"),
        _step("clean", "extract"),
        _step("enrich", "extract"),
        _step("report", "clean", "enrich", "extract"),
    ]
    assert dag_svg.layers(steps) == {"extract": 0, "clean": 1, "enrich": 1, "report": 2}
    placed = dag_svg.positions(steps)
    assert placed["clean"][0] == placed["enrich"][0] > placed["extract"][0]
    assert placed["clean"][1] < placed["enrich"][1]  # declaration order within a layer
    assert placed["report"][0] > placed["clean"][0]


def test_the_svg_colours_each_step_by_state_and_links_it_to_its_job() -> None:
    steps = [
        _step("a<1>", state=StepState.SUCCEEDED, job_id=7, job_state="succeeded"),
        _step("b", "a<1>", state=StepState.QUEUED, job_id=8, job_state="running"),
        _step("c", "b"),
    ]
    svg = dag_svg.render(steps)
    assert svg.startswith("<svg id=dag") and svg.count("<path class=edge") == 2
    assert '<a href="/dashboard/jobs/7"><g class="node succeeded" data-step="a&lt;1&gt;"' in svg
    assert '<g class="node running" data-step="b"' in svg  # the job's finer state
    assert '<g class="node waiting" data-step="c"' in svg and "/dashboard/jobs/None" not in svg
    assert "a<1>" not in svg
    assert dag_svg.render([]) == ""
