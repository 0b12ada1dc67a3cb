"""Readiness reports what is wrong to a read (or admin) caller: an unreachable database,
pending migrations, Redis down; the API answers 503 (not 500) while the database is
unreachable. Anonymous callers get ok or not only (tests/security/test_health_privacy.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ledgerq.transport.probe import RedisPingProbe
from tests.admin.conftest import READ, serve

REDIS_URL = os.environ.get("LEDGERQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
NOWHERE = "redis://127.0.0.1:1/0"


def test_unmigrated_database_is_not_ready(tmp_path: Path) -> None:
    for served in serve(f"sqlite:///{tmp_path / 'empty.db'}"):
        response = served.client.get("/health/ready", headers=READ)
        assert response.status_code == 503
        checks = response.json()["checks"]
        assert checks["database"]["ok"] is True
        assert checks["migrations"]["ok"] is False
        assert "ledgerq db migrate" in checks["migrations"]["detail"]
        assert served.client.get("/health/live").status_code == 200


def test_unreachable_database_gives_503_not_500() -> None:
    for served in serve("postgresql://postgres@127.0.0.1:1/nowhere"):
        ready = served.client.get("/health/ready", headers=READ)
        assert ready.status_code == 503 and ready.json()["checks"]["database"]["ok"] is False
        response = served.client.get("/api/v1/jobs/1", headers=READ)
        assert response.status_code == 503 and "unavailable" in response.json()["detail"]


def test_redis_probe(make_database_url: object) -> None:
    up = RedisPingProbe(REDIS_URL).check()
    if not up.ok:
        message = f"Redis is not reachable at {REDIS_URL}: {up.detail}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    down = RedisPingProbe(NOWHERE).check()
    assert down.ok is False and "unreachable" in down.detail
    url = make_database_url("sqlite")  # type: ignore[operator]
    for served in serve(url, redis_url=NOWHERE):
        checks = served.client.get("/health/ready", headers=READ).json()["checks"]
        assert checks["redis"]["ok"] is False and checks["database"]["ok"] is True
    for served in serve(url, redis_url=REDIS_URL):
        checks = served.client.get("/health/ready", headers=READ).json()["checks"]
        assert checks["redis"]["ok"] is True
