"""Least privilege, as docs/operations.md documents it: the documented SQL, run as written
(only names and passwords made unique), creates a migration role and a runtime role; the
migration role migrates; a worker completes jobs and ``ledgerq serve`` answers its API as the
runtime role, which may not change the schema. The janitor, which may vacuum only as the
table's owner, skips with one warning under the runtime role."""

from __future__ import annotations

import json
import re
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from structlog.testing import capture_logs

from ledgerq.runtime.janitor import Janitor
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from ledgerq.store.migrate import migrate as run_migrations
from ledgerq.store.postgres import postgres_driver
from tests.conftest import MYSQL_URL, POSTGRES_URL, _unavailable
from tests.deploy.deploy_files import (
    LEDGERQ,
    REPO_ROOT,
    Services,
    base_env,
    http_request,
    http_status,
)
from tests.helpers import wait_until
from tests.producers.calls import sql_enqueue
from tests.redis_server import free_port

OPERATIONS = REPO_ROOT / "docs" / "operations.md"
JOBS = 5


def doc_sql(first_line: str) -> str:
    """The ```sql block of docs/operations.md that starts with ``first_line``."""
    blocks = re.findall(r"```sql\n(.*?)```", OPERATIONS.read_text(), flags=re.DOTALL)
    (block,) = [b for b in blocks if b.startswith(first_line + "\n")]
    return str(block)


def statements(block: str, names: dict[str, str]) -> list[str]:
    """The block's statements with the documented names replaced (whole words only)."""
    for old, new in names.items():
        block = re.sub(rf"(?<![\w-]){re.escape(old)}(?![\w-])", new, block)
    lines = [line for line in block.splitlines() if not line.startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def run_sql(url: str, block: list[str]) -> None:
    """Run each statement on its own, in autocommit (CREATE DATABASE needs it)."""
    engine = create_engine(url)
    try:
        with engine.connect() as plain:
            conn = plain.execution_options(isolation_level="AUTOCOMMIT")
            # pymysql formats even a statement without parameters: its '%' is written '%%'.
            escape = conn.dialect.name in ("mysql", "mariadb")
            for statement in block:
                conn.exec_driver_sql(statement.replace("%", "%%") if escape else statement)
    finally:
        engine.dispose()


def sql_producer_job(url: str) -> int:
    """A job enqueued as the runtime role through the SQL contract (docs/producers.md)."""
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            return sql_enqueue(conn, "tasks.hello", ["role sql"])
    finally:
        engine.dispose()


@dataclass
class Roles:
    """A database set up by the documented SQL: URLs of both roles and of an administrator."""

    backend: str
    migrate_url: str
    runtime_url: str
    admin_url: str


def _url(base: str, user: str, password: str, database: str) -> str:
    url = sa.make_url(base).set(username=user, password=password, database=database, query={})
    return url.render_as_string(hide_password=False)


def _postgres_roles(tag: str) -> Iterator[Roles]:
    migrate, app, database = f"lqm_{tag}", f"lqa_{tag}", f"lq_{tag}"
    passwords = {"migrate": secrets.token_hex(8), "app": secrets.token_hex(8)}
    names = {
        "ledgerq_migrate": migrate,
        "ledgerq_app": app,
        "ledgerq": database,
        "'change-me-migrate'": f"'{passwords['migrate']}'",
        "'change-me-app'": f"'{passwords['app']}'",
    }
    admin = sa.make_url(POSTGRES_URL).set(query={}).render_as_string(hide_password=False)
    in_database = sa.make_url(admin).set(database=database).render_as_string(hide_password=False)
    try:
        run_sql(
            admin, statements(doc_sql("-- PostgreSQL, as a superuser, in any database:"), names)
        )
    except sa.exc.OperationalError as exc:
        _unavailable("PostgreSQL", exc)
    try:
        block = doc_sql("-- PostgreSQL, as a superuser, in the ledgerq database:")
        run_sql(in_database, statements(block, names))
        yield Roles(
            "postgresql",
            _url(admin, migrate, passwords["migrate"], database),
            _url(admin, app, passwords["app"], database),
            in_database,
        )
    finally:
        run_sql(
            admin,
            [
                f"DROP DATABASE IF EXISTS {database} WITH (FORCE)",
                f"DROP ROLE IF EXISTS {migrate}",
                f"DROP ROLE IF EXISTS {app}",
            ],
        )


def _mariadb_roles(tag: str) -> Iterator[Roles]:
    migrate, app, database = f"lqm_{tag}", f"lqa_{tag}", f"lq_{tag}"
    passwords = {"migrate": secrets.token_hex(8), "app": secrets.token_hex(8)}
    names = {
        "ledgerq_migrate": migrate,
        "ledgerq_app": app,
        "ledgerq": database,
        "'change-me-migrate'": f"'{passwords['migrate']}'",
        "'change-me-app'": f"'{passwords['app']}'",
    }
    admin = sa.make_url(MYSQL_URL).render_as_string(hide_password=False)
    try:
        run_sql(admin, statements(doc_sql("-- MariaDB, as root:"), names))
    except sa.exc.OperationalError as exc:
        _unavailable("MariaDB", exc)
    try:
        yield Roles(
            "mysql",
            _url(admin, migrate, passwords["migrate"], database),
            _url(admin, app, passwords["app"], database),
            sa.make_url(admin).set(database=database).render_as_string(hide_password=False),
        )
    finally:
        run_sql(
            admin,
            [
                f"DROP DATABASE IF EXISTS {database}",
                f"DROP USER IF EXISTS '{migrate}'@'%'",
                f"DROP USER IF EXISTS '{app}'@'%'",
            ],
        )


@pytest.fixture(params=["postgresql", "mysql"])
def roles(request: pytest.FixtureRequest) -> Iterator[Roles]:
    """A fresh database with the documented migration and runtime roles, dropped afterwards."""
    tag = secrets.token_hex(4)
    if request.param == "postgresql":
        yield from _postgres_roles(tag)
    else:
        yield from _mariadb_roles(tag)


@pytest.fixture
def role_services(tmp_path: Path, roles: Roles) -> Iterator[Services]:
    """Processes of the test, all dead before the roles' database is dropped."""
    started = Services(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


def test_runtime_role_works_and_serves_after_migration_role_migrates(
    roles: Roles, role_services: Services, app_dir: Path
) -> None:
    migrated = subprocess.run(
        [LEDGERQ, "db", "migrate"],
        env=base_env(LEDGERQ_DATABASE_URL=roles.migrate_url),
        cwd=app_dir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert migrated.returncode == 0, migrated.stderr

    # The runtime role may not change the schema.
    runtime = create_engine(roles.runtime_url)
    try:
        for ddl in ("CREATE TABLE intruder (i INTEGER)", "DROP TABLE jobs"):
            with pytest.raises(sa.exc.DBAPIError), runtime.begin() as conn:
                conn.exec_driver_sql(ddl)
    finally:
        runtime.dispose()

    token = secrets.token_urlsafe(24)
    env = base_env(
        LEDGERQ_APP="tasks:app",
        LEDGERQ_DATABASE_URL=roles.runtime_url,
        LEDGERQ_API_TOKEN=token,
        LEDGERQ_POLL_INTERVAL="0.2",
    )
    health, serve_port = free_port(), free_port()
    worker = role_services.start(
        [LEDGERQ, "worker", "start", "--health-port", str(health)], env=env, cwd=app_dir
    )
    serve = role_services.start([LEDGERQ, "serve", "--port", str(serve_port)], env=env, cwd=app_dir)
    base = f"http://127.0.0.1:{serve_port}"
    for proc, url in (
        (worker, f"http://127.0.0.1:{health}/health/live"),
        (serve, f"{base}/health/ready"),
    ):
        wait_until(
            lambda p=proc, u=url: http_status(u) == 200 or p.poll() is not None,
            timeout=30,
            what="healthy",
        )
        assert proc.poll() is None, role_services.log(proc)

    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    ids = [sql_producer_job(roles.runtime_url)]
    for n in range(JOBS - 1):
        body = json.dumps({"task": "tasks.hello", "args": [f"role {n}"]}).encode()
        status, _, answer = http_request(
            f"{base}/api/v1/jobs", method="POST", data=body, headers=auth
        )
        assert status == 201, answer
        ids.append(json.loads(answer)["id"])

    def states() -> list[str]:
        return [
            json.loads(http_request(f"{base}/api/v1/jobs/{i}", headers=auth)[2])["state"]
            for i in ids
        ]

    wait_until(lambda: states() == ["succeeded"] * JOBS, timeout=30, what="jobs done")
    assert http_status(f"{base}/admin/queue/stats", headers=auth) == 200
    assert http_status(f"{base}/admin/queue/workers", headers=auth) == 200

    for proc in (worker, serve):
        role_services.stop(proc)
        log = role_services.log(proc).lower()
        assert "permission denied" not in log and "command denied" not in log, log[-3000:]
        assert "traceback" not in log, log[-3000:]

    if roles.backend == "postgresql":  # the documented grants for existing tables run too
        names = {
            "ledgerq": sa.make_url(roles.admin_url).database or "",
            "ledgerq_app": sa.make_url(roles.runtime_url).username or "",
        }
        run_sql(
            roles.admin_url,
            statements(doc_sql("-- PostgreSQL, existing tables, in the ledgerq database:"), names),
        )


@pytest.mark.parametrize("roles", ["postgresql"], indirect=True)
def test_janitor_skips_vacuum_with_one_warning_under_the_runtime_role(
    roles: Roles, monkeypatch: pytest.MonkeyPatch
) -> None:
    migrate = create_engine(roles.migrate_url)
    runtime = create_engine(roles.runtime_url)
    try:
        run_migrations(migrate)
        monkeypatch.setattr(postgres_driver, "MAINTAIN_DEAD_TUPLES", 0)  # always "needed"
        janitor = Janitor(SqlJobStore(runtime), interval_seconds=60)
        with capture_logs() as logs:
            for _ in range(3):
                janitor.tick()  # no error, however often
        skipped = [e for e in logs if e["event"] == "table maintenance skipped"]
        assert len(skipped) == 1 and skipped[0]["log_level"] == "warning", logs
        assert "does not own table jobs" in skipped[0]["reason"]
        assert not [e for e in logs if e["event"] == "ledger tables vacuumed"], logs
        # The owner (the migration role) still vacuums.
        assert SqlJobStore(migrate).maintain_tables() is True
    finally:
        runtime.dispose()
        migrate.dispose()
