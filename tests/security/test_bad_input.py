"""Bad input is a 4xx or a one-line CLI error, never a 5xx or a traceback, and stores nothing
(issue 22, B). The checks live in ``ledgerq.core`` (validation, codec, schedules) and serve the
CLI, the HTTP API and Python callers alike."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq import LedgerQ
from ledgerq.core import errors
from ledgerq.store.engine import create_engine
from tests.admin.conftest import ADMIN, READ, Served, serve

pytestmark = pytest.mark.timeout(120)

REPO_ROOT = Path(__file__).resolve().parents[2]
APP = "tests.admin.tasks_app:app"
JSON = {**ADMIN, "Content-Type": "application/json"}
DEEP_ARGS = "[" * 5000 + "]" * 5000


@pytest.fixture
def sqlite_url(make_database_url: Callable[[str], str]) -> str:
    return make_database_url("sqlite")


@pytest.fixture
def served(sqlite_url: str) -> Iterator[Served]:
    yield from serve(sqlite_url)


def _count(url: str, table: str) -> int:
    engine = create_engine(url, pool_size=1)
    try:
        with engine.connect() as connection:
            return int(connection.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


BAD_ENQUEUE_BODIES = {
    "NaN delay": '{"task": "admin.add", "args": [1, 2], "delay": NaN}',
    "infinite timeout": '{"task": "admin.add", "args": [1, 2], "timeout": Infinity}',
    "NaN in args": '{"task": "admin.add", "args": [NaN, 2]}',
    "lone surrogate in args": '{"task": "admin.add", "args": ["\\ud800", 2]}',
    "lone surrogate in kwargs": '{"task": "admin.add", "kwargs": {"a": "\\udfff", "b": 1}}',
    "lone surrogate in task": '{"task": "admin.\\ud800"}',
    "control character in dedupe key": '{"task": "admin.add", "dedupe_key": "a\\u0001b"}',
}


@pytest.mark.parametrize("case", sorted(BAD_ENQUEUE_BODIES))
def test_bad_enqueue_bodies_are_4xx_and_store_nothing(served: Served, case: str) -> None:
    response = served.client.post("/api/v1/jobs", content=BAD_ENQUEUE_BODIES[case], headers=JSON)
    assert 400 <= response.status_code < 500, response.text
    assert "detail" in response.json()
    assert served.app.client.list() == []


def test_a_lone_surrogate_in_schedule_args_is_4xx_and_stores_nothing(served: Served) -> None:
    body = '{"name": "nightly", "task": "admin.add", "cron": "0 3 * * *", "args": ["\\ud800"]}'
    response = served.client.post("/admin/schedules", content=body, headers=JSON)
    assert 400 <= response.status_code < 500, response.text
    assert served.client.get("/admin/schedules", headers=READ).json() in ([], {"schedules": []})


@pytest.mark.parametrize("query", ["task=a%00b", "queue=a%00b"])
def test_a_nul_in_a_list_filter_is_4xx_on_postgresql(
    make_database_url: Callable[[str], str], query: str
) -> None:
    for served in serve(make_database_url("postgresql")):
        response = served.client.get(f"/api/v1/jobs?{query}", headers=READ)
        assert 400 <= response.status_code < 500, response.text


def test_python_callers_get_the_same_refusals(sqlite_url: str) -> None:
    app = LedgerQ(database_url=sqlite_url)
    app.task(name="t")(lambda ctx, *a: None)
    with pytest.raises(errors.InvalidQueueName):
        app.client.build("t", queue="")
    with pytest.raises(errors.InvalidJob, match="control characters"):
        app.client.build("t", dedupe_key="a\nb")
    with pytest.raises(errors.InvalidJob, match="timeout"):
        app.client.build("t", timeout=float("inf"))
    with pytest.raises(errors.PayloadError, match="Unicode"):
        app.client.build("t", ["\ud800"])
    with pytest.raises(errors.JobNotFound):
        app.client.get(2**63)
    with pytest.raises(errors.InvalidJob, match="task filter"):
        app.client.list(task="a\x00b")
    app.close()


def _cli(
    url: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}
    clean |= {"LEDGERQ_DATABASE_URL": url, "LEDGERQ_APP": APP, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "ledgerq.cli.main", *args],
        cwd=REPO_ROOT,
        env=clean,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


ENQUEUE = ("job", "enqueue", "admin.add")
BAD_COMMANDS: dict[str, tuple[tuple[str, ...], dict[str, str], str]] = {
    "args nested 5000 deep": ((*ENQUEUE, "--args", DEEP_ARGS), {}, "nested too deeply"),
    "lone surrogate in args": ((*ENQUEUE, "--args", '["\\ud800", 2]'), {}, "Unicode"),
    "job id beyond bigint": (("job", "show", str(2**63)), {}, "no job with id"),
    "cancel id beyond bigint": (("job", "cancel", str(2**64)), {}, "no job with id"),
    "empty queue": ((*ENQUEUE, "--args", "[1, 2]", "--queue", ""), {}, "invalid queue name"),
    "control character in dedupe key": (
        (*ENQUEUE, "--args", "[1, 2]", "--dedupe-key", "a\x01b"),
        {},
        "control characters",
    ),
    "10 KB cron": (
        ("schedule", "add", "big", "--task", "admin.add", "--cron", "* " * 5000),
        {},
        "cron must be 1 to 200 characters",
    ),
    "redis URL without ://": (
        ("job", "list"),
        {"LEDGERQ_REDIS_URL": "redis//:S3cretPW@127.0.0.1:6379"},
        "redis_url must start with",
    ),
    "redis URL with a port that is not a number": (
        ("job", "list"),
        {"LEDGERQ_REDIS_URL": "redis://:S3cretPW@127.0.0.1:abc/0"},
        "redis_url",
    ),
    "in-memory SQLite": (("job", "list"), {"LEDGERQ_DATABASE_URL": "sqlite:///:memory:"}, "memory"),
    "infinite heartbeat": (("job", "list"), {"LEDGERQ_HEARTBEAT_INTERVAL": "inf"}, "heartbeat"),
    "NaN ttl": (("job", "list"), {"LEDGERQ_WORKER_TTL": "nan"}, "worker_ttl"),
    "heartbeat not shorter than the TTL": (
        ("job", "list"),
        {"LEDGERQ_HEARTBEAT_INTERVAL": "20", "LEDGERQ_WORKER_TTL": "15"},
        "shorter than",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_COMMANDS))
def test_bad_cli_input_is_one_clear_line_and_stores_nothing(sqlite_url: str, case: str) -> None:
    args, env, fragment = BAD_COMMANDS[case]

    result = _cli(sqlite_url, *args, env=env)

    shown = f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.returncode == 1, shown
    assert "Traceback" not in result.stderr, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), shown
    assert fragment in lines[0], shown
    assert "S3cretPW" not in result.stderr
    assert _count(sqlite_url, "jobs") == 0
    assert _count(sqlite_url, "schedules") == 0
