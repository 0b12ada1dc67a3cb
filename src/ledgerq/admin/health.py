"""Health endpoints (no token: load balancers and orchestrators call them) and ``/metrics``
(Prometheus exposition; read token)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from ledgerq.admin import schemas
from ledgerq.admin.api import Deps, Reader

router = APIRouter(tags=["health"])


def _readiness(request: Request) -> tuple[bool, dict[str, Any]]:
    deps = request.app.state.deps
    results = [probe.check() for probe in deps.probes]
    checks = {r.name: {"ok": r.ok, "detail": r.detail} for r in results}
    return all(r.ok for r in results), checks


def _answer(ok: bool, checks: dict[str, Any]) -> JSONResponse:
    body = {"status": "ok" if ok else "fail", "checks": checks}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get(
    "/health",
    response_model=schemas.HealthOut,
    responses={503: {"model": schemas.HealthOut}},
)
def health(request: Request) -> JSONResponse:
    """Readiness with every check's detail: 200 when all pass, 503 otherwise."""
    return _answer(*_readiness(request))


@router.get("/health/live", response_model=schemas.HealthOut)
def live() -> dict[str, Any]:
    """The process answers (no dependency is checked)."""
    return {"status": "ok", "checks": {}}


@router.get(
    "/health/ready",
    response_model=schemas.HealthOut,
    responses={503: {"model": schemas.HealthOut}},
)
def ready(request: Request) -> JSONResponse:
    """Database reachable, migrations current, Redis reachable when configured: 200 or 503."""
    return _answer(*_readiness(request))


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}},
        401: {"model": schemas.Problem},
        403: {"model": schemas.Problem},
    },
)
def metrics(_caller: Reader, deps: Deps) -> Response:
    """Prometheus exposition of the metrics of SPEC section 8."""
    body, content_type = deps.render_metrics()
    return Response(body, media_type=content_type)
