"""Every input the SQL enqueue contract refuses (docs/producers.md, "Errors"): a database
error whose message starts with ``ledgerq:`` and names the problem, and nothing stored, on
PostgreSQL and MariaDB alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from ledgerq.store.tables import job_dedupe_windows, jobs
from tests.conftest import fresh_database_url
from tests.producers.calls import sql_enqueue

_SOON = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
_PAST = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
_FAR = (datetime.now(UTC) + timedelta(days=400)).isoformat()

#: (case id, task, args, queue, options, what the message says)
REFUSALS: list[tuple[str, str, Any, str, dict[str, Any], str]] = [
    ("empty task", "", [], "default", {}, "task must be 1 to 200 characters"),
    ("long task", "t" * 201, [], "default", {}, "task must be 1 to 200 characters"),
    ("control task", "a\tb", [], "default", {}, "without control characters"),
    ("queue space", "t", [], "bad queue", {}, "invalid queue name 'bad queue'"),
    ("queue empty", "t", [], "", {}, "invalid queue name"),
    ("queue long", "t", [], "q" * 65, {}, "invalid queue name"),
    ("queue newline", "t", [], "q\n", {}, "invalid queue name"),
    ("args object", "t", "{}", "default", {}, "args must be a JSON array"),
    ("args scalar", "t", "42", "default", {}, "args must be a JSON array"),
    ("kwargs list", "t", [], "default", {"kwargs": [1]}, "kwargs must be a JSON object"),
    ("oversize", "t", ["x" * 300_000], "default", {}, "exceeds the cap of 262144 bytes"),
    (
        "too deep",
        "t",
        [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
        "default",
        {},
        "nested",
    ),
    ("priority high", "t", [], "default", {"priority": 32768}, "priority must lie within"),
    ("priority low", "t", [], "default", {"priority": -40000}, "priority must lie within"),
    ("delay negative", "t", [], "default", {"delay": -1}, "delay must be 0 to 31622400"),
    ("delay absurd", "t", [], "default", {"delay": 10**9}, "delay must be 0 to 31622400"),
    (
        "delay and run_at",
        "t",
        [],
        "default",
        {"delay": 5, "run_at": _SOON},
        "either delay or run_at",
    ),
    ("run_at far", "t", [], "default", {"run_at": _FAR}, "run_at must lie within a year"),
    ("max_attempts 0", "t", [], "default", {"max_attempts": 0}, "max_attempts must be at least 1"),
    ("timeout 0", "t", [], "default", {"timeout": 0}, "timeout must be a positive"),
    ("timeout negative", "t", [], "default", {"timeout": -3}, "timeout must be a positive"),
    ("dedupe_key empty", "t", [], "default", {"dedupe_key": ""}, "dedupe_key must be 1 to 255"),
    (
        "dedupe_key long",
        "t",
        [],
        "default",
        {"dedupe_key": "k" * 256},
        "dedupe_key must be 1 to 255",
    ),
    (
        "dedupe_key control",
        "t",
        [],
        "default",
        {"dedupe_key": "a\nb"},
        "dedupe_key must be 1 to 255",
    ),
    ("window alone", "t", [], "default", {"dedupe_for": 60}, "dedupe_for needs a dedupe_key"),
    (
        "window 0",
        "t",
        [],
        "default",
        {"dedupe_key": "k", "dedupe_for": 0},
        "dedupe_for must be over 0",
    ),
    ("expired", "t", [], "default", {"expires_at": _PAST}, "expires_at"),
]

#: Refusals only MariaDB's procedure has: its options travel as one JSON object.
MARIADB_REFUSALS: list[tuple[str, str, Any, str, Any, str]] = [
    ("unknown option", "t", [], "default", {"colour": "red"}, "unknown option 'colour'"),
    ("priority float", "t", [], "default", {"priority": 1.5}, "priority must be a whole number"),
    ("delay text", "t", [], "default", {"delay": "10"}, "delay must be a number of seconds"),
    ("run_at no zone", "t", [], "default", {"run_at": "2027-01-01T00:00:00"}, "with a zone"),
    (
        "run_at impossible",
        "t",
        [],
        "default",
        {"run_at": "2027-02-31T00:00:00Z"},
        "not a valid time",
    ),
    ("held text", "t", [], "default", {"held": "yes"}, "held must be true or false"),
    ("not json", "t", "[1,", "default", {}, "args must be JSON"),
]


def _assert_refused(url: str, case: tuple[str, str, Any, str, Any, str]) -> None:
    _, task, args, queue, options, message = case
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            with pytest.raises(sa.exc.DBAPIError) as caught, conn.begin():
                sql_enqueue(conn, task, args, queue, **options)
            text = str(caught.value.orig)
            assert "ledgerq: " in text and message in text, text
            assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one() == 0
            windows = sa.select(sa.func.count()).select_from(job_dedupe_windows)
            assert conn.execute(windows).scalar_one() == 0
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One migrated ledger per SQL backend, shared by this module's refusal cases (each case
    stores nothing, which it checks)."""
    made: dict[str, str] = {}
    cleanups = []
    for backend in ("postgresql", "mysql"):
        generator = fresh_database_url(backend, tmp_path_factory.mktemp(backend))
        made[backend] = next(generator)
        cleanups.append(generator)
        engine = create_engine(made[backend])
        migrate(engine)
        engine.dispose()
    yield made
    for generator in cleanups:
        next(generator, None)


@pytest.mark.parametrize("backend_name", ["postgresql", "mysql"])
@pytest.mark.parametrize("case", REFUSALS, ids=[c[0] for c in REFUSALS])
def test_bad_input_is_refused_and_stores_nothing(
    ledgers: dict[str, str], backend_name: str, case: tuple[str, str, Any, str, Any, str]
) -> None:
    _assert_refused(ledgers[backend_name], case)


@pytest.mark.parametrize("case", MARIADB_REFUSALS, ids=[c[0] for c in MARIADB_REFUSALS])
def test_mariadb_refuses_bad_options(
    ledgers: dict[str, str], case: tuple[str, str, Any, str, Any, str]
) -> None:
    _assert_refused(ledgers["mysql"], case)


def test_postgresql_refuses_text_a_database_cannot_store(ledgers: dict[str, str]) -> None:
    # A NUL and a lone surrogate are JSON escapes PostgreSQL's json accepts but cannot store.
    for args in ('["\\u0000"]', '["\\ud800"]'):
        _assert_refused(ledgers["postgresql"], ("nul", "t", args, "default", {}, "JSON text"))


def test_a_refusal_after_a_good_call_rolls_back_the_callers_transaction(
    ledgers: dict[str, str],
) -> None:
    engine = create_engine(ledgers["postgresql"])
    try:
        with engine.connect() as conn:
            with pytest.raises(sa.exc.DBAPIError), conn.begin():
                sql_enqueue(conn, "t", [1])
                sql_enqueue(conn, "t", [2], "bad queue")
            assert conn.execute(sa.select(sa.func.count()).select_from(jobs)).scalar_one() == 0
    finally:
        engine.dispose()
