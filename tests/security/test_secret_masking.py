"""No secret is shown to anyone (issue 22, A): a task's error and traceback, as recorded and as
the API, the dashboard and ``ledgerq job show`` show them, go through the log masking; a
malformed database URL is never echoed with its password; ``config show`` and
``worker export-config`` mask every form of Redis password."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa

from ledgerq.cli.main import main
from ledgerq.core.redaction import mask_text, mask_value
from tests.admin.conftest import READ, READ_TOKEN, Served, serve

SECRET = "S3cretPW"
LEAKY_REASON = (
    f"could not connect to postgresql://app:{SECRET}@db.internal/app"
    f" (dsn: host=db.internal user=app password={SECRET})"
)
APP = "tests.admin.tasks_app:app"


@pytest.fixture
def served(make_database_url: Callable[[str], str]) -> Iterator[Served]:
    yield from serve(make_database_url("sqlite"))


def _failed_job(served: Served) -> int:
    app = served.app
    job_id = app.client.enqueue([app.client.build("admin.boom", [LEAKY_REASON])])[0].job_id
    app.worker(queues=["mail"], burst=True, poll_interval_seconds=0.05).run()
    assert app.client.get(job_id).state.value == "dead"
    return job_id


def test_mask_text_keeps_the_error_useful() -> None:
    masked = mask_text(LEAKY_REASON)
    assert SECRET not in masked
    assert "postgresql://app:***@db.internal/app" in masked
    assert "password=***" in masked and "host=db.internal" in masked
    assert mask_text("redis://:pw@h:6379/0") == "redis://:***@h:6379/0"
    assert mask_text("redis://h/0?password=pw&db=1") == "redis://h/0?password=***&db=1"
    assert mask_text('{"api_key": "k1", "n": 1}') == '{"api_key": "***", "n": 1}'
    assert mask_text("author=bob, token expired") == "author=bob, token expired"
    assert mask_value({"token": "x", "dsn": f"mysql://u:{SECRET}@h/d"}) == {
        "token": "***",
        "dsn": "mysql://u:***@h/d",
    }


def test_the_api_and_dashboard_never_show_a_tasks_password(served: Served) -> None:
    job_id = _failed_job(served)

    response = served.client.get(f"/api/v1/jobs/{job_id}", headers=READ)

    assert response.status_code == 200, response.text
    assert SECRET not in response.text
    error = response.json()["error"]
    assert "postgresql://app:***@db.internal/app" in error["message"]
    assert "RuntimeError" in error["traceback"]
    listed = served.client.get("/api/v1/jobs", headers=READ)
    assert listed.status_code == 200 and SECRET not in listed.text
    served.client.post(
        "/dashboard/login",
        content=f"token={READ_TOKEN}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    page = served.client.get(f"/dashboard/jobs/{job_id}")
    assert page.status_code == 200 and "RuntimeError" in page.text
    assert SECRET not in page.text


def test_the_error_is_masked_where_it_is_recorded(served: Served) -> None:
    job_id = _failed_job(served)
    engine = sa.create_engine(served.app.settings.database_url.get_secret_value())
    with engine.connect() as connection:
        stored = connection.execute(sa.text(f"SELECT error FROM jobs WHERE id = {job_id}"))
        error_text = stored.scalar_one()
    engine.dispose()
    assert SECRET not in error_text
    assert "db.internal" in error_text


def test_job_show_never_shows_a_tasks_password(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    job_id = _failed_job(served)
    capsys.readouterr()  # the worker's own log lines
    url = served.app.settings.database_url.get_secret_value()
    for extra in ([], ["--json"]):
        code = main(["--app", APP, "--database-url", url, *extra, "job", "show", str(job_id)])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert SECRET not in out and SECRET not in err
        assert "db.internal" in out
    code = main(["--app", APP, "--database-url", url, "job", "list"])
    out, _ = capsys.readouterr()
    assert code == 0 and SECRET not in out


@pytest.mark.parametrize(
    "url",
    [
        f"redis+sentinel://:{SECRET}@127.0.0.1:26379,/mymaster",  # an empty sentinel address
        f"redis+sentinel://:{SECRET}@127.0.0.1:26379",  # no master name
        f"redis+sentinel://h1/mymaster?sentinel_password={SECRET}&sentinel_pasword={SECRET}",
    ],
)
def test_a_malformed_sentinel_url_is_never_echoed_with_its_password(
    url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEDGERQ_REDIS_URL", url)
    code = main(["config", "show"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "redis_url" in err and SECRET not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "url",
    [f"postgresql//app:{SECRET}@db.internal/app", f"postgresql://app:{SECRET}@db.internal:x/app"],
)
def test_a_malformed_database_url_is_never_echoed_with_its_password(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["--database-url", url, "job", "list"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "database URL" in err and SECRET not in err and "Traceback" not in err


@pytest.mark.parametrize(
    "redis_url",
    [
        f"redis://127.0.0.1:6379/0?password={SECRET}",
        f"redis://:{SECRET}@127.0.0.1:6379/0",
        f"redis://default:{SECRET}@127.0.0.1:6379/0",
        f"redis+sentinel://:{SECRET}@127.0.0.1:26379,10.0.0.2:26379/mymaster/0",
        f"redis+sentinel://127.0.0.1:26379,10.0.0.2/mymaster?sentinel_password={SECRET}",
    ],
)
@pytest.mark.parametrize("command", [["config", "show"], ["worker", "export-config"]])
def test_config_show_and_export_config_mask_redis_passwords(
    redis_url: str,
    command: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: object,
) -> None:
    monkeypatch.setenv("LEDGERQ_REDIS_URL", redis_url)
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", f"postgresql://app:{SECRET}@db.internal/app")
    for extra in ([], ["--json"]):
        code = main([*extra, *command])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert SECRET not in out and SECRET not in err
        assert "127.0.0.1" in out
    assert json.dumps(mask_text(redis_url)).count("***") == 1
