"""``/admin/schedules``: list, add, remove, pause and resume periodic schedules and read their
runs, through the same ``ScheduleAdmin`` as ``ledgerq schedule`` (read token to look, admin
token to change; every change is audited)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from ledgerq.admin import schemas
from ledgerq.admin.api import ERRORS, Admin, Deps, Reader, record_audit
from ledgerq.admin.deps import mask_secrets
from ledgerq.core.schedules import (
    MAX_CATCHUP_LIMIT,
    MissedPolicy,
    OverlapPolicy,
    ScheduleOverview,
    ScheduleRequest,
    ScheduleRun,
)

router = APIRouter(responses=ERRORS, tags=["schedules"])

#: Names as ``core.schedules.SCHEDULE_NAME`` takes them: no spaces or control characters. They
#: may hold slashes (``billing/nightly``), so the paths below take them with ``{name:path}``.
NAME_PATTERN = r"^[^\s\x00-\x1f\x7f]+$"
ScheduleName = Annotated[
    str, Path(min_length=1, max_length=200, pattern=NAME_PATTERN, description="Schedule name.")
]


class ScheduleIn(BaseModel):
    """A run-time schedule: enqueue ``task`` with these arguments at every tick of ``cron``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    task: str = Field(min_length=1, max_length=200, pattern=schemas.KEY_PATTERN)
    cron: str = Field(
        min_length=1,
        max_length=200,
        pattern=schemas.KEY_PATTERN,
        description="5 fields (minute hour day month weekday), or 6 with seconds first.",
    )
    tz: str = Field(default="UTC", min_length=1, max_length=100, pattern=schemas.KEY_PATTERN)
    args: list[Any] = Field(default_factory=list, description="Positional arguments.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments.")
    queue: str | None = Field(default=None, pattern=schemas.QUEUE_PATTERN)
    missed: MissedPolicy = Field(
        default=MissedPolicy.SKIP, description="Ticks missed while no scheduler ran."
    )
    max_catchup: int = Field(default=10, ge=1, le=MAX_CATCHUP_LIMIT)
    overlap: OverlapPolicy = Field(
        default=OverlapPolicy.ALLOW, description="skip: no tick while the last run is unfinished."
    )


class RunOut(BaseModel):
    """One fired tick."""

    tick: datetime
    job_id: int | None = Field(description="None: skipped, the previous run was unfinished.")
    executed_by: str = Field(description="The scheduler instance (or worker) that fired it.")


class ScheduleOut(BaseModel):  # type: ignore[no-redef]  # pydantic plugin: a field named kwargs
    """A schedule, its policies and where it stands; secret-looking arguments are masked."""

    name: str
    cron: str
    tz: str
    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    queue: str | None
    paused: bool
    missed: str
    max_catchup: int
    overlap: str
    source: str = Field(description="code (declared with @app.periodic) or runtime.")
    last_tick: datetime | None = Field(description="Every tick up to here was handled.")
    next_tick: datetime | None = Field(
        description="None until a scheduler has passed over it since it was added or resumed."
    )
    last_run: RunOut | None = None


class SchedulesOut(BaseModel):
    """Every schedule, by name."""

    schedules: list[ScheduleOut]


class RunsOut(BaseModel):
    """A schedule's newest runs first."""

    name: str
    runs: list[RunOut]


def _run(run: ScheduleRun) -> dict[str, Any]:
    return {"tick": run.tick, "job_id": run.job_id, "executed_by": run.executed_by}


def _schedule(overview: ScheduleOverview) -> dict[str, Any]:
    document = overview.state.as_dict()
    payload = document.pop("args")
    document["args"] = mask_secrets(list(payload.get("args", [])))
    document["kwargs"] = mask_secrets(dict(payload.get("kwargs", {})))
    last_run = overview.last_run
    document["last_run"] = _run(last_run) if last_run is not None else None
    return document


@router.get("/admin/schedules", response_model=SchedulesOut)
def list_schedules(_caller: Reader, deps: Deps) -> dict[str, Any]:
    """Every schedule: policies, paused, last and next tick, newest run."""
    return {"schedules": [_schedule(o) for o in deps.schedules.list_schedules()]}


@router.get("/admin/schedules/{name:path}/runs", response_model=RunsOut)
def list_runs(
    name: ScheduleName,
    _caller: Reader,
    deps: Deps,
    limit: Annotated[int, Query(ge=1, le=1000)] = 20,
) -> dict[str, Any]:
    """The newest fired ticks: job and the instance that fired it (404 for a name with
    neither a schedule nor runs; a removed schedule keeps its history)."""
    return {"name": name, "runs": [_run(r) for r in deps.schedules.list_runs(name, limit=limit)]}


@router.post("/admin/schedules", status_code=201, response_model=ScheduleOut)
def add_schedule(body: ScheduleIn, request: Request, caller: Admin, deps: Deps) -> dict[str, Any]:
    """Add a run-time schedule. 422 for a bad cron expression, time zone or policy; 400 for
    an unknown task (when the server knows the application's tasks) or arguments that are not
    JSON or too large; 409 if the name is taken."""
    overview = deps.schedules.add_schedule(
        ScheduleRequest(
            body.name,
            cron=body.cron,
            task=body.task,
            args=tuple(body.args),
            kwargs=body.kwargs,
            tz=body.tz,
            queue=body.queue,
            missed=body.missed.value,
            max_catchup=body.max_catchup,
            overlap=body.overlap.value,
        )
    )
    record_audit(request, caller, "schedule-add", schedule=body.name, task=body.task)
    return _schedule(overview)


@router.delete("/admin/schedules/{name:path}", status_code=204, response_class=Response)
def remove_schedule(name: ScheduleName, request: Request, caller: Admin, deps: Deps) -> Response:
    """Delete a schedule (its runs stay). 409 for one the application's code declares: pause
    it, or delete it from the code."""
    deps.schedules.remove_schedule(name)
    record_audit(request, caller, "schedule-remove", schedule=name)
    return Response(status_code=204)


@router.post("/admin/schedules/{name:path}/pause", response_model=ScheduleOut)
def pause_schedule(
    name: ScheduleName, request: Request, caller: Admin, deps: Deps
) -> dict[str, Any]:
    """Stop the schedule from firing; kept across scheduler restarts."""
    overview = deps.schedules.pause_schedule(name)
    record_audit(request, caller, "schedule-pause", schedule=name)
    return _schedule(overview)


@router.post("/admin/schedules/{name:path}/resume", response_model=ScheduleOut)
def resume_schedule(
    name: ScheduleName, request: Request, caller: Admin, deps: Deps
) -> dict[str, Any]:
    """Let the schedule fire again from now on; the ticks of the pause never run."""
    overview = deps.schedules.resume_schedule(name)
    record_audit(request, caller, "schedule-resume", schedule=name)
    return _schedule(overview)
