"""create_app: the FastAPI application of ``ledgerq serve`` (API, health, metrics, dashboard),
with ledgerq's errors mapped onto HTTP status codes and a cap on request bodies."""

from __future__ import annotations

import json

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ledgerq.admin import (
    api,
    batches_api,
    bulk_api,
    dashboard,
    flow_pages,
    health,
    limits_api,
    locks_api,
    operations_api,
    operations_pages,
    schedules_api,
    workflows_api,
)
from ledgerq.admin.auth import TokenAuth
from ledgerq.admin.deps import AdminDeps
from ledgerq.admin.guard import Gatekeeper
from ledgerq.admin.throttle import LoginThrottle
from ledgerq.core import errors
from ledgerq.core.batches import BatchNotFound
from ledgerq.core.schedules import InvalidScheduleDefinition, ScheduleExists, ScheduleNotFound
from ledgerq.core.workflow import WorkflowNotFound

#: The application type, for callers outside this package (which never import FastAPI).
HttpApp = FastAPI

#: Status code per error class; the first match in this order wins.
STATUS: tuple[tuple[type[errors.LedgerqError], int], ...] = (
    (errors.JobNotFound, 404),
    (BatchNotFound, 404),
    (WorkflowNotFound, 404),
    (ScheduleNotFound, 404),
    (ScheduleExists, 409),
    (errors.InvalidTransition, 409),
    (errors.StoreUnavailable, 503),
    (errors.InvalidJob, 400),
    (errors.TaskNotRegistered, 400),
)


def _json_safe(value: object) -> object:
    """``value`` if strict JSON in UTF-8 can carry it, else its ASCII ``repr``."""
    try:
        json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return ascii(value)
    return value


def create_app(
    deps: AdminDeps, auth: TokenAuth, *, max_body_bytes: int, max_bulk_bytes: int | None = None
) -> FastAPI:
    """The HTTP application over ``deps``; ``auth`` holds the hashed tokens. Requests without
    valid credentials are refused before their body is read (``guard.Gatekeeper``); bodies
    above ``max_body_bytes`` received are refused with 413, ``max_bulk_bytes`` for the
    requests that carry many jobs (bulk, batches, workflows; default: ``max_body_bytes``)."""
    app = FastAPI(
        title="ledgerq admin API",
        version="1",
        description="Jobs, queues, workers and health of a ledgerq deployment. Every endpoint"
        " but /health* needs `Authorization: Bearer <token>` (or a dashboard session).",
        # The document is served below, behind a token; no Swagger UI (it loads from a CDN).
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        # Counts the bytes received (chunked bodies too) and answers 413 past the cap.
        max_body_size=max_body_bytes,
    )

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_document(_caller: api.Reader) -> JSONResponse:
        """The OpenAPI document (read token)."""
        return JSONResponse(app.openapi())

    app.state.deps = deps
    app.state.auth = auth
    app.state.login_throttle = LoginThrottle()
    # Reads deps.probes at each check, so probes swapped in later are used.
    app.state.readiness = health.ReadinessCache(lambda: health.check_probes(deps.probes))
    app.include_router(health.router)
    app.include_router(api.router)
    app.include_router(bulk_api.router, max_body_size=max_bulk_bytes or max_body_bytes)
    app.include_router(locks_api.router)
    app.include_router(operations_api.router)
    app.include_router(limits_api.router)
    app.include_router(schedules_api.router)
    app.include_router(batches_api.router, max_body_size=max_bulk_bytes or max_body_bytes)
    app.include_router(workflows_api.router, max_body_size=max_bulk_bytes or max_body_bytes)
    app.include_router(dashboard.router)
    app.include_router(flow_pages.router)
    app.include_router(operations_pages.router)

    @app.exception_handler(errors.LedgerqError)
    async def on_ledgerq_error(_request: Request, exc: errors.LedgerqError) -> JSONResponse:
        status = next((code for kind, code in STATUS if isinstance(exc, kind)), 500)
        return JSONResponse({"detail": str(exc)}, status_code=status)

    @app.exception_handler(RequestValidationError)
    async def on_invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own 422, except that the refused input is echoed only if it can be
        # written as JSON: NaN, Infinity or a lone surrogate in a body made the default
        # handler fail with a 500.
        problems = [
            {**problem, "input": _json_safe(problem["input"])} if "input" in problem else problem
            for problem in jsonable_encoder(exc.errors())
        ]
        return JSONResponse({"detail": problems}, status_code=422)

    @app.exception_handler(InvalidScheduleDefinition)
    async def on_invalid_schedule(
        _request: Request, exc: InvalidScheduleDefinition
    ) -> JSONResponse:
        # Shaped like FastAPI's own 422s, so a client reads one kind of validation error
        # whether pydantic or the cron parser refused the field.
        problem = {"type": "value_error", "loc": ["body", exc.field], "msg": str(exc)}
        return JSONResponse({"detail": [problem]}, status_code=422)

    @app.exception_handler(Exception)
    async def on_unhandled_error(_request: Request, _exc: Exception) -> JSONResponse:
        # The error's text may name hosts or credentials: it goes to the log (uvicorn logs
        # it once the response is out, through server.StructlogForwarder), not to the client.
        return JSONResponse({"detail": "internal server error"}, status_code=500)

    app.add_middleware(Gatekeeper, auth=auth)
    return app
