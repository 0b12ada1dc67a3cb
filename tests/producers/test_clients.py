"""Producers no Python wrote: the shipped PHP example (PDO, in its own transaction) and the
``psql`` and ``mariadb`` command-line clients enqueue through the SQL contract; a rollback
leaves no job, a commit makes one that a real worker runs once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from ledgerq.store.tables import jobs
from tests.acceptance import effects_app
from tests.acceptance.conftest import REPO_ROOT, Ledger, Procs
from tests.producers.test_sql_enqueue import assert_ran_once

pytestmark = pytest.mark.timeout(120)

Make = Callable[[str], Ledger]
PHP_EXAMPLE = REPO_ROOT / "examples" / "php" / "enqueue.php"
PRODUCERS_DOC = REPO_ROOT / "docs" / "producers.md"


def need(tool: str) -> str:
    """The path of ``tool``; skip without it locally, fail under CI (which installs it)."""
    path = shutil.which(tool)
    if path is None:
        message = f"{tool} is not installed (apt-get install php-cli php-pgsql php-mysql)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path


def client_env(url: str) -> tuple[sa.URL, dict[str, str]]:
    """The ledger's URL parsed, and an environment whose PGOPTIONS selects its schema (libpq
    reads it in psql and PHP alike)."""
    parsed = sa.make_url(url)
    env = dict(os.environ)
    options = parsed.query.get("options")
    if options:
        env["PGOPTIONS"] = str(options)
    return parsed, env


def run(argv: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, input=stdin, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def php(db: Ledger, *args: str) -> subprocess.CompletedProcess[str]:
    parsed, env = client_env(db.url)
    if parsed.get_backend_name() == "postgresql":
        dsn = f"pgsql:host={parsed.host};port={parsed.port or 5432};dbname={parsed.database}"
    else:
        dsn = (
            f"mysql:host={parsed.host};port={parsed.port or 3306};dbname={parsed.database};"
            "charset=utf8mb4"
        )
    env.update(
        LEDGERQ_PDO_DSN=dsn,
        LEDGERQ_PDO_USER=parsed.username or "",
        LEDGERQ_PDO_PASSWORD=parsed.password or "",
    )
    return run([need("php"), str(PHP_EXAMPLE), *args], env)


def burst(db: Ledger, procs: Procs) -> None:
    result = procs.run(db.url, "worker", "start", "--burst", timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("backend_name", ["postgresql", "mysql"])
def test_the_php_example_enqueues_in_its_own_transaction(
    ledger: Make, procs: Procs, backend_name: str
) -> None:
    db = ledger(backend_name)
    task = effects_app.RECORD_EFFECT
    rolled = php(db, task, '["php-rolled-back"]', "--rollback")
    assert rolled.returncode == 0, rolled.stderr
    assert json.loads(rolled.stdout)["committed"] is False
    assert db.job_count() == 0
    options = json.dumps({"priority": 3, "max_attempts": 2, "dedupe_key": "php-1"})
    committed = php(db, task, '["php-committed"]', "--options", options)
    assert committed.returncode == 0, committed.stderr
    job_id = json.loads(committed.stdout)["job_id"]
    again = php(db, task, '["php-again"]', "--options", options)  # the key is taken
    assert json.loads(again.stdout)["job_id"] == job_id
    assert set(db.jobs()) == {job_id}
    burst(db, procs)
    assert_ran_once(db, {"php-committed"})
    refused = php(db, task, "[]", "--queue", "no spaces")
    assert refused.returncode == 1
    assert "ledgerq: invalid queue name 'no spaces'" in refused.stderr
    assert db.job_count() == 1


def psql_argv(url: sa.URL) -> list[str]:
    argv = [need("psql"), "-X", "-q", "-t", "-A", "-v", "ON_ERROR_STOP=1"]
    argv += ["-h", str(url.host), "-p", str(url.port or 5432)]
    return [*argv, "-U", str(url.username), str(url.database)]


def mariadb_argv(url: sa.URL) -> list[str]:
    argv = [need("mariadb"), "--batch", "--skip-column-names"]
    argv += ["-h", str(url.host), "-P", str(url.port or 3306), "-u", str(url.username)]
    return [*argv, str(url.database)]


def doc_example(first_line: str) -> str:
    """The ```sql block of docs/producers.md that starts with ``first_line``."""
    blocks = re.findall(r"```sql\n(.*?)```", PRODUCERS_DOC.read_text(), flags=re.DOTALL)
    (block,) = [b for b in blocks if b.startswith(first_line + "\n")]
    return str(block)


@pytest.mark.parametrize("backend_name", ["postgresql", "mysql"])
def test_the_documented_client_examples_run_as_written(ledger: Make, backend_name: str) -> None:
    db = ledger(backend_name)
    with db.engine.begin() as conn:  # the application's own table the examples write to
        conn.exec_driver_sql("CREATE TABLE orders (id INTEGER PRIMARY KEY, total NUMERIC(10, 2))")
    parsed, env = client_env(db.url)
    if backend_name == "postgresql":
        result = run(psql_argv(parsed), env, doc_example("BEGIN;"))
    else:
        result = run(mariadb_argv(parsed), env, doc_example("START TRANSACTION;"))
    assert result.returncode == 0, result.stderr
    (job_id,) = (int(line) for line in result.stdout.split())
    with db.engine.connect() as conn:
        job = conn.execute(sa.select(jobs).where(jobs.c.id == job_id)).one()
        orders = conn.exec_driver_sql("SELECT id FROM orders").scalars().all()
    assert (job.task, job.queue, job.priority, job.dedupe_key, job.state) == (
        "send_receipt",
        "mail",
        1,
        "receipt-42",
        "queued",
    )
    assert json.loads(job.args) == {"args": [42], "kwargs": {}}
    assert orders == [42]


def test_psql_enqueues_in_a_transaction(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    parsed, env = client_env(db.url)
    psql = psql_argv(parsed)
    task = effects_app.RECORD_EFFECT
    script = (
        f"BEGIN; SELECT ledgerq_enqueue('{task}', '[\"psql-rolled-back\"]'); ROLLBACK;\n"
        f"BEGIN; SELECT ledgerq_enqueue('{task}', '[\"psql\"]', 'default', priority => 1);"
        " COMMIT;\n"
    )
    result = run(psql, env, script)
    assert result.returncode == 0, result.stderr
    _rolled_back, committed = (int(line) for line in result.stdout.split())
    assert list(db.jobs()) == [committed]  # the rolled-back id names no job
    burst(db, procs)
    assert_ran_once(db, {"psql"})
    refused = run(psql, env, f"SELECT ledgerq_enqueue('{task}', '[]', delay => -1);")
    assert refused.returncode != 0 and "ERROR:  ledgerq: delay must be" in refused.stderr
    assert db.job_count() == 1


def test_the_mariadb_client_enqueues_in_a_transaction(ledger: Make, procs: Procs) -> None:
    db = ledger("mysql")
    parsed, env = client_env(db.url)
    client = mariadb_argv(parsed)
    task = effects_app.RECORD_EFFECT
    script = (
        f"START TRANSACTION; CALL ledgerq_enqueue('{task}', '[\"mariadb-rolled-back\"]',"
        " 'default', NULL, @id); ROLLBACK;\n"
        f"START TRANSACTION; CALL ledgerq_enqueue('{task}', '[\"mariadb\"]', 'default',"
        " '{\"priority\": 1}', @id); COMMIT; SELECT @id;\n"
    )
    result = run(client, env, script)
    assert result.returncode == 0, result.stderr
    assert [int(line) for line in result.stdout.split()] == list(db.jobs())
    burst(db, procs)
    assert_ran_once(db, {"mariadb"})
    refused = run(
        client, env, f"CALL ledgerq_enqueue('{task}', '[]', 'q', '{{\"delay\": -1}}', @id);"
    )
    assert refused.returncode != 0 and "(45000)" in refused.stderr
    assert "ledgerq: delay must be" in refused.stderr
    assert db.job_count() == 1
