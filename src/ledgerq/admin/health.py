"""Health endpoints (no token: load balancers and orchestrators call them) and ``/metrics``
(Prometheus exposition; read token).

An anonymous caller learns only ok or not: the checks' details (driver errors naming hosts and
ports, migration revisions, Redis reachability) go to read and admin callers. Readiness is
computed at most about once per ``READINESS_TTL_SECONDS`` however often it is asked for, so a
hammered probe cannot turn into a database round trip per request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import JSONResponse

from ledgerq.admin import schemas
from ledgerq.admin.api import Deps, Reader
from ledgerq.admin.auth import Role, TokenAuth
from ledgerq.core.operations import HealthProbe

router = APIRouter(tags=["health"])
READINESS_TTL_SECONDS = 1.0

Readiness = tuple[bool, dict[str, Any]]


class ReadinessCache:
    """The last readiness result, reused for ``ttl_seconds``. One caller computes a new one
    at a time; while it does, the others get the previous result rather than queueing behind
    a slow database."""

    def __init__(
        self,
        compute: Callable[[], Readiness],
        ttl_seconds: float = READINESS_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._compute = compute
        self._ttl = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._value: Readiness | None = None
        self._at = 0.0

    def get(self) -> Readiness:
        """The readiness, at most ``ttl_seconds`` old."""
        value = self._value
        if value is not None and self._clock() - self._at < self._ttl:
            return value
        if not self._lock.acquire(blocking=value is None):
            assert value is not None  # a blocking acquire always succeeds
            return value  # someone is checking right now; the last answer will do
        try:
            if self._value is None or self._clock() - self._at >= self._ttl:
                self._value = self._compute()
                self._at = self._clock()
            return self._value
        finally:
            self._lock.release()


def check_probes(probes: Sequence[HealthProbe]) -> Readiness:
    """Run every probe now: whether all passed, and each one's outcome by name."""
    results = [probe.check() for probe in probes]
    checks = {r.name: {"ok": r.ok, "detail": r.detail} for r in results}
    return all(r.ok for r in results), checks


def _may_see_details(request: Request) -> bool:
    auth: TokenAuth = request.app.state.auth
    try:
        caller = auth.authenticate(request)
    except HTTPException:
        return False  # a probe without (or with a wrong) token still gets its ok or not
    return caller.role is not Role.PRODUCER  # details are for operators


def _answer(request: Request) -> JSONResponse:
    cache: ReadinessCache = request.app.state.readiness
    ok, checks = cache.get()
    body = {"status": "ok" if ok else "fail", "checks": checks if _may_see_details(request) else {}}
    return JSONResponse(body, status_code=200 if ok else 503)


@router.get(
    "/health",
    response_model=schemas.HealthOut,
    responses={503: {"model": schemas.HealthOut}},
)
def health(request: Request) -> JSONResponse:
    """Readiness: 200 when every check passes, 503 otherwise; each check's detail only for a
    read or admin caller."""
    return _answer(request)


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
    """Database reachable, migrations current, Redis reachable when configured: 200 or 503
    (cached for about a second); each check's detail only for a read or admin caller."""
    return _answer(request)


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
