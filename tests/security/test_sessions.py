"""Sessions and sign-ins: signing out revokes the session on the server, wrong sign-ins are
throttled per client address (429 with Retry-After, one audit line), and a public bind refuses
short tokens (issue 22, item 3)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from ledgerq.admin.server import check_bind
from ledgerq.cli.main import main
from ledgerq.core import errors
from tests.admin.conftest import ADMIN_TOKEN, Served, serve

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.fixture
def served(make_database_url: Callable[[str], str]) -> Iterator[Served]:
    yield from serve(make_database_url("sqlite"))


def _sign_in(client: TestClient, token: str) -> int:
    response = client.post(
        "/dashboard/login", content=f"token={token}".encode(), headers=FORM, follow_redirects=False
    )
    return int(response.status_code)


def test_signing_out_revokes_the_session(served: Served) -> None:
    client = served.client
    assert _sign_in(client, ADMIN_TOKEN) == 303
    cookie = client.cookies["ledgerq_session"]
    page = client.get("/dashboard")
    csrf = re.search(r'name=csrf-token content="([0-9a-f]+)"', page.text)
    assert csrf is not None
    assert client.post("/dashboard/logout", headers={"X-CSRF-Token": csrf.group(1)}).status_code
    # The browser forgot the cookie; a copy of it (a stolen one) must not work either.
    stolen = TestClient(
        served.http, base_url="http://127.0.0.1", cookies={"ledgerq_session": cookie}
    )
    assert stolen.get("/admin/queue/stats").status_code == 401
    assert stolen.get("/dashboard", follow_redirects=False).status_code == 303
    # A new sign-in gets a new session that works.
    assert _sign_in(client, ADMIN_TOKEN) == 303
    assert client.get("/admin/queue/stats").status_code == 200


def test_wrong_sign_ins_are_throttled_per_client(served: Served) -> None:
    attacker = TestClient(served.http, base_url="http://127.0.0.1", client=("203.0.113.9", 4000))
    with capture_logs() as logs:
        codes = [_sign_in(attacker, f"guess-{n}") for n in range(100)]
    assert codes[:5] == [403] * 5
    assert set(codes[5:]) == {429}
    refused = attacker.post("/dashboard/login", content=b"token=x", headers=FORM)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    # While throttled even the right token is not tried: guessing gains nothing.
    assert _sign_in(attacker, ADMIN_TOKEN) == 429
    audit = [line for line in logs if line.get("action") == "login"]
    assert len(audit) <= 7, f"{len(audit)} audit lines for 100 guesses"
    assert any(line.get("outcome") == "throttled" for line in audit)
    # Another address is not affected.
    other = TestClient(served.http, base_url="http://127.0.0.1", client=("198.51.100.7", 4000))
    assert _sign_in(other, ADMIN_TOKEN) == 303


def test_a_public_bind_refuses_short_tokens(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(errors.ConfigError, match="16 characters"):
        check_bind("0.0.0.0", admin_tokens=["short-token"])
    with pytest.raises(errors.ConfigError, match="16 characters"):
        check_bind("0.0.0.0", admin_tokens=["a-token-of-sixteen-chars"], read_tokens=["short"])
    with pytest.raises(errors.ConfigError, match="without a token"):
        check_bind("0.0.0.0", admin_tokens=[], read_tokens=["a-read-token-long-enough"])
    check_bind("127.0.0.1", admin_tokens=["short-token"])  # loopback: a warning only
    check_bind("0.0.0.0", admin_tokens=["a-token-of-sixteen-chars"])
    monkeypatch.setenv("LEDGERQ_API_TOKEN", "tooshort")
    assert main(["serve", "--host", "0.0.0.0", "--port", "0"]) == 1
    err = capsys.readouterr().err
    assert "16 characters" in err and "Traceback" not in err and "tooshort" not in err
