"""Bad input through the real ``ledgerq`` command line: a clear one-line error naming the
problem, a non-zero exit, no traceback, and nothing stored (SPEC section 10)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.effects_app import RECORD_EFFECT

pytestmark = pytest.mark.timeout(120)

Make = Callable[[str], Ledger]


def assert_clear_error(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit code 1, and stderr is one ``error: ...`` line containing every fragment."""
    shown = f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.returncode == 1, shown
    assert "Traceback" not in result.stderr, shown
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, shown
    assert lines[0].startswith("error: "), shown
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in the error line\n{shown}"


BAD_ENQUEUES = {
    "unknown task": (["no.such.task", "--args", "[]"], {}, ["unknown task", "no.such.task"]),
    "args not JSON": ([RECORD_EFFECT, "--args", "not json"], {}, ["--args is not JSON"]),
    # One argv string is capped at 128 KiB by Linux, so the default 256 KiB cap cannot be
    # reached from the command line: lower the cap instead.
    "oversize payload": (
        [RECORD_EFFECT, "--args", json.dumps(["x" * 2000])],
        {"LEDGERQ_MAX_PAYLOAD_BYTES": "1000"},
        ["exceeds the cap of 1000 bytes"],
    ),
    "invalid queue name": (
        [RECORD_EFFECT, "--args", '["k"]', "--queue", "bad queue!"],
        {},
        ["invalid queue name", "bad queue!"],
    ),
    "negative delay": (
        [RECORD_EFFECT, "--args", '["k"]', "--delay", "-5"],
        {},
        ["delay", "negative"],
    ),
    "absurd delay": (
        [RECORD_EFFECT, "--args", '["k"]', "--delay", "1e12"],
        {},
        ["delay", "more than a year"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ENQUEUES))
def test_bad_enqueue_is_refused_clearly_and_stores_nothing(
    case: str, ledger: Make, procs: Procs
) -> None:
    args, env, fragments = BAD_ENQUEUES[case]
    db = ledger("sqlite")

    result = procs.run(db.url, "job", "enqueue", *args, env=env)

    assert_clear_error(result, *fragments)
    assert db.job_count() == 0


def test_only_the_good_enqueue_is_listed(ledger: Make, procs: Procs) -> None:
    # The control: the same command line with good input works, so the refusals above are
    # about the input and not the harness; and a refusal leaves nothing `job list` would show.
    db = ledger("sqlite")
    refused = procs.run(db.url, "job", "enqueue", RECORD_EFFECT, "--args", "{broken")
    assert_clear_error(refused, "--args is not JSON")

    result = procs.run(db.url, "--json", "job", "enqueue", RECORD_EFFECT, "--args", '["k"]')
    assert result.returncode == 0, result.stderr
    job_id = json.loads(result.stdout)["id"]

    listed = procs.run(db.url, "--json", "job", "list")
    assert listed.returncode == 0, listed.stderr
    assert [(j["id"], j["state"], j["task"]) for j in json.loads(listed.stdout)] == [
        (job_id, "queued", RECORD_EFFECT)
    ]


def test_unknown_app_module_is_a_clear_error(ledger: Make, procs: Procs) -> None:
    db = ledger("sqlite")

    result = procs.run(db.url, "job", "list", app="nosuchmodule:app")

    assert_clear_error(result, "nosuchmodule")


def test_show_of_a_missing_job_is_a_clear_error(ledger: Make, procs: Procs) -> None:
    db = ledger("sqlite")

    result = procs.run(db.url, "job", "show", "999999")

    assert_clear_error(result, "999999")


def test_unknown_setting_in_the_environment_is_a_clear_error(ledger: Make, procs: Procs) -> None:
    db = ledger("sqlite")

    result = procs.run(db.url, "job", "list", env={"LEDGERQ_NO_SUCH_SETTING": "1"})

    assert_clear_error(result, "LEDGERQ_NO_SUCH_SETTING")


def test_a_malformed_read_url_is_a_clear_error_with_its_password_masked(
    ledger: Make, procs: Procs
) -> None:
    db = ledger("sqlite")
    env = {"LEDGERQ_DATABASE_READ_URL": "oracle://reader:read-pw@replica/ledger"}

    result = procs.run(db.url, "queue", "stats", env=env)

    assert_clear_error(result, "unsupported database 'oracle'")
    assert "read-pw" not in result.stdout + result.stderr


def test_a_worker_on_a_ledger_without_tables_stops_with_a_clear_error(
    procs: Procs, tmp_path: Path
) -> None:
    empty = f"sqlite:///{tmp_path / 'never-migrated.db'}"

    result = procs.run(empty, "worker", "start", "--burst", timeout=30)

    assert_clear_error(result, "tables are missing", "ledgerq db migrate")
