"""Tokens, roles, sessions and CSRF: every endpoint but /health needs a token; a read token
cannot change anything; a browser session cannot change anything without its CSRF token."""

from __future__ import annotations

import re

import pytest

from ledgerq.admin.auth import SESSION_COOKIE, Role, TokenAuth
from ledgerq.cli.main import main
from tests.admin.conftest import ADMIN, ADMIN_TOKEN, READ, READ_TOKEN, Served

READS = [
    "/api/v1/jobs",
    "/api/v1/jobs/1",
    "/admin/queue/stats",
    "/admin/queue/workers",
    "/admin/metrics",
    "/metrics",
    "/openapi.json",
    "/admin/schedules",
    "/admin/schedules/nightly/runs",
    "/api/v1/batches/1",
    "/api/v1/workflows",
    "/api/v1/workflows/abc",
]
CHANGES = [
    "/api/v1/jobs/1/cancel",
    "/api/v1/jobs/1/retry",
    "/admin/queues/default/pause",
    "/admin/queues/default/resume",
    "/admin/schedules/nightly/pause",
    "/admin/schedules/nightly/resume",
    "/api/v1/batches/1/retry-failed",
    "/api/v1/workflows/abc/cancel",
    "/api/v1/workflows/abc/retry",
]


def test_without_token_401_and_with_wrong_token_403(served_sqlite: Served) -> None:
    client = served_sqlite.client
    wrong = {"Authorization": "Bearer not-the-token"}
    for path in READS:
        assert client.get(path).status_code == 401, path
        assert client.get(path).headers["www-authenticate"].startswith("Bearer")
        assert client.get(path, headers=wrong).status_code == 403, path
        assert client.get(path, headers={"Authorization": ADMIN_TOKEN}).status_code == 403
    for path in [*CHANGES, "/api/v1/jobs", "/admin/schedules"]:
        assert client.post(path, json={"task": "admin.add"}).status_code == 401, path
        assert client.post(path, json={"task": "admin.add"}, headers=wrong).status_code == 403


def test_read_token_reads_but_cannot_change(served_sqlite: Served) -> None:
    client = served_sqlite.client
    job_id = served_sqlite.app.client.enqueue(
        [served_sqlite.app.client.build("admin.add", [1, 2])]
    )[0].job_id
    assert client.get(f"/api/v1/jobs/{job_id}", headers=READ).status_code == 200
    assert client.get("/metrics", headers=READ).status_code == 200
    for path in [f"/api/v1/jobs/{job_id}/cancel", "/admin/queues/default/pause"]:
        response = client.post(path, headers=READ)
        assert response.status_code == 403 and "admin" in response.json()["detail"]
    refused = client.post("/api/v1/jobs", json={"task": "admin.add"}, headers=READ)
    assert refused.status_code == 403
    assert client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ADMIN).status_code == 200


def test_dashboard_session_needs_csrf_token_for_changes(served_sqlite: Served) -> None:
    client = served_sqlite.client
    assert client.get("/dashboard", follow_redirects=False).status_code == 303
    bad = client.post(
        "/dashboard/login",
        content=b"token=wrong",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert bad.status_code == 403 and SESSION_COOKIE not in client.cookies
    login = client.post(
        "/dashboard/login",
        content=f"token={ADMIN_TOKEN}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert login.status_code == 303
    cookie = login.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = client.get("/dashboard")
    assert page.status_code == 200 and "Queues" in page.text
    csrf = re.search(r'name=csrf-token content="([0-9a-f]+)"', page.text)
    assert csrf is not None
    assert client.get("/admin/queue/stats").status_code == 200  # the session reads
    assert client.post("/admin/queues/default/pause").status_code == 403  # no CSRF token
    forged = client.post("/admin/queues/default/pause", headers={"X-CSRF-Token": "0" * 64})
    assert forged.status_code == 403
    ok = client.post("/admin/queues/default/pause", headers={"X-CSRF-Token": csrf.group(1)})
    assert ok.status_code == 200
    assert client.get("/dashboard/jobs/1", follow_redirects=False).status_code == 404


def test_tokens_are_kept_hashed_and_sessions_are_signed() -> None:
    auth = TokenAuth(admin_tokens=[ADMIN_TOKEN], read_tokens=[READ_TOKEN])
    assert ADMIN_TOKEN not in repr(vars(auth)) and READ_TOKEN not in repr(vars(auth))
    assert auth.role_of(ADMIN_TOKEN) is Role.ADMIN and auth.role_of(READ_TOKEN) is Role.READ
    assert auth.role_of("") is None and auth.role_of(ADMIN_TOKEN + "x") is None
    session = auth.new_session(Role.READ)
    assert auth.session_role(session) is Role.READ
    assert auth.session_role(session.replace("read", "admin", 1)) is None
    other = TokenAuth(admin_tokens=["rotated"], read_tokens=[])
    assert other.session_role(session) is None  # rotating the token signs everyone out


def test_serve_refuses_a_public_bind_without_token(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LEDGERQ_API_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert "refusing to serve on 0.0.0.0 without a token" in err
    assert "Traceback" not in err


def test_dashboard_pages_filter_and_show_details(served_sqlite: Served) -> None:
    app = served_sqlite.app
    secret = app.client.build("admin.add", [1, 2], {"api_key": "sk-live-123"})
    job_id = app.client.enqueue([secret, app.client.build("admin.boom")])[0].job_id
    client = served_sqlite.client
    client.post(
        "/dashboard/login",
        content=f"token={READ_TOKEN}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    page = client.get("/dashboard/jobs", params={"task": "admin.add", "state": "", "queue": ""})
    assert page.status_code == 200 and "admin.add" in page.text and "admin.boom" not in page.text
    odd = client.get("/dashboard/jobs", params={"queue": "no such\x00queue"})
    assert odd.status_code == 200 and "admin.add" not in odd.text
    detail = client.get(f"/dashboard/jobs/{job_id}")
    assert detail.status_code == 200 and "sk-live-123" not in detail.text and "***" in detail.text
    assert "default-src 'self'" in detail.headers["content-security-policy"]
    assert client.get("/dashboard/static/dashboard.js").status_code == 200
    assert client.get("/dashboard/static/../app.py").status_code == 404
