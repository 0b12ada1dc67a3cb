"""Circuit breakers on every surface: ``ledgerq queue breakers|reset-breaker``,
``GET /admin/queue/breakers`` and the ``circuit_breaker_state`` gauge; and the limits of the
Python API (``@app.task`` options, ``app.rate_limiter``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from ledgerq import ConfigError, LedgerQ
from ledgerq.cli.main import main
from ledgerq.core.limits import Breaker
from tests.admin.conftest import ADMIN, READ, Served

BREAKER = Breaker(failures=2, reset_after=60)


def open_breaker(app: LedgerQ, name: str = "breaker:report") -> None:
    for _ in range(2):
        app.limits.record_breaker(name=name, breaker=BREAKER, succeeded=False)


def test_breakers_over_http_and_in_metrics(served: Served) -> None:
    assert served.client.get("/admin/queue/breakers").status_code == 401
    assert served.client.get("/admin/queue/breakers", headers=READ).json() == {"breakers": []}
    open_breaker(served.app)
    body = served.client.get("/admin/queue/breakers", headers=ADMIN).json()
    (row,) = body["breakers"]
    assert (row["name"], row["state"], row["failures"]) == ("breaker:report", "open", 2)
    assert row["opened_at"] is not None
    metrics = served.client.get("/metrics", headers=READ).text
    assert 'circuit_breaker_state{name="breaker:report"} 2.0' in metrics
    served.app.limits.reset_breaker("breaker:report")
    metrics = served.client.get("/metrics", headers=READ).text
    assert 'circuit_breaker_state{name="breaker:report"} 0.0' in metrics


def test_breakers_from_the_cli(
    make_database_url: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = make_database_url("sqlite")
    app = LedgerQ(database_url=url)
    open_breaker(app)
    assert main(["--database-url", url, "--json", "queue", "breakers"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["name"], row["state"]) == ("breaker:report", "open")
    assert main(["--database-url", url, "queue", "breakers"]) == 0
    assert "breaker:report" in capsys.readouterr().out
    assert main(["--database-url", url, "queue", "reset-breaker", "breaker:report"]) == 0
    assert app.limits.list_breakers()[0].state.value == "closed"
    assert main(["--database-url", url, "queue", "reset-breaker", "breaker:nope"]) != 0
    err = capsys.readouterr().err
    assert "no circuit breaker named 'breaker:nope'" in err and "Traceback" not in err
    app.close()


def test_task_limit_options_are_checked_at_registration() -> None:
    app = LedgerQ(database_url="sqlite:///:memory:")
    with pytest.raises(ConfigError, match="invalid rate limit 'fast'"):
        app.task(rate_limit="fast")(lambda ctx: None)
    with pytest.raises(ConfigError, match="concurrency_limit"):
        app.task(concurrency_limit=0)(lambda ctx: None)
    with pytest.raises(ConfigError, match="rate_key needs rate_limit"):
        app.task(rate_key=lambda x: x)(lambda ctx, x: None)
    task = app.task(name="sms", rate_limit="10/s", rate_key=lambda n, provider: provider)(
        lambda ctx, n, provider: None
    )
    assert task.spec.limits is not None and task.spec.limits.rate is not None
    assert task.spec.limits.rate.limit == 10


def test_application_rate_limiter_is_shared(make_database_url: Callable[[str], str]) -> None:
    url = make_database_url("sqlite")
    web_a, web_b = LedgerQ(database_url=url), LedgerQ(database_url=url)
    logins_a = web_a.rate_limiter("login", "3/m", burst=3)
    logins_b = web_b.rate_limiter("login", "3/m", burst=3)
    assert [logins_a.try_acquire(key="ann").allowed for _ in range(2)] == [True, True]
    assert logins_b.try_acquire(key="ann").allowed  # the third, from another instance
    denied = logins_b.try_acquire(key="ann")
    assert not denied.allowed and 0 < denied.retry_after_seconds <= 20.0
    assert logins_a.try_acquire(key="bob").allowed  # another key, another window
    with pytest.raises(ConfigError):
        web_a.rate_limiter("login", "3 per minute")
    web_a.close()
    web_b.close()
