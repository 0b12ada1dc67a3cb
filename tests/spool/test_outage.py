"""Enqueue through a database outage (``LEDGERQ_SPOOL``): a producer enqueues 1,000 jobs while
its private PostgreSQL is stopped (``pg_ctl stop -m immediate``, as a crash) and started
again; with a Redis or a file spool every job exists exactly once afterwards, in the
producer's order, and a worker runs each once. With the spool off, enqueue fails at once.
The PostgreSQL and Redis servers are private to each test; the shared ones are never touched."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq import LedgerQ
from ledgerq.cli.main import main
from ledgerq.core import errors
from ledgerq.producer.job_handle import SpooledHandle
from ledgerq.runtime.context import JobContext
from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from tests.acceptance.private_servers import PrivatePostgres
from tests.helpers import running_worker, wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)

JOBS = 1000


class Database:
    """A fresh ledger database in the module's private cluster; stopping it stops the whole
    cluster (its other databases belong to tests that already ended)."""

    def __init__(self, cluster: PrivatePostgres) -> None:
        self.cluster = cluster
        name = f"spool_{secrets.token_hex(4)}"
        cluster.sql(f"CREATE DATABASE {name}")
        self.url = cluster.url.rsplit("/", 1)[0] + f"/{name}"
        self.running = True
        engine = create_engine(self.url)
        migrate(engine)
        engine.dispose()

    def stop_immediately(self) -> None:
        self.cluster.stop_immediately()
        self.running = False

    def start(self) -> None:
        self.cluster.start()
        self.running = True


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres(cluster: PrivatePostgres) -> Iterator[Database]:
    database = Database(cluster)
    try:
        yield database
    finally:
        if not database.running:
            database.start()


class Producer:
    """Enqueues ``JOBS`` jobs one by one on a thread, up to the ``allow``-ed count, recording
    each answer's status."""

    def __init__(self, app: LedgerQ) -> None:
        self.runs: Counter[int] = Counter()
        self._runs_lock = threading.Lock()

        @app.task()
        def record(ctx: JobContext, n: int) -> None:
            with self._runs_lock:
                self.runs[n] += 1

        self.task = record
        self.statuses: list[str] = []
        self.failure: BaseException | None = None
        self._limit = 0
        self._raised = threading.Condition()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            for n in range(JOBS):
                with self._raised:
                    self._raised.wait_for(lambda n=n: n < self._limit)
                self.statuses.append(self.task.enqueue(n).status)
        except BaseException as exc:
            self.failure = exc

    def allow(self, count: int) -> None:
        """Let the producer enqueue up to ``count`` jobs in all and wait until it has."""
        with self._raised:
            self._limit = count
            self._raised.notify_all()
        wait_until(
            lambda: len(self.statuses) >= count or self.failure, what=f"{count} jobs enqueued"
        )
        assert self.failure is None, self.failure


def enqueue_through_outages(app: LedgerQ, postgres: Database) -> Producer:
    """Enqueue 200 jobs, crash PostgreSQL, enqueue 200 more (spooled), start it again and go
    on until the producer is back on the database (its own replay of its spooled jobs), then
    crash it again for the last 300, which stay in the spool for a drainer."""
    producer = Producer(app)
    producer.allow(200)
    postgres.stop_immediately()
    producer.allow(400)
    assert producer.statuses[200:400] == ["spooled"] * 200
    postgres.start()

    def one_more_is_created() -> bool:
        # One enqueue per poll, so the producer's database retry interval passes early on.
        producer.allow(len(producer.statuses) + 1)
        return producer.statuses[-1] == "created"

    wait_until(one_more_is_created, interval=0.05, what="the producer back on the database")
    assert len(producer.statuses) < 650
    producer.allow(700)
    assert producer.statuses[-1] == "created"
    postgres.stop_immediately()
    producer.allow(JOBS)
    assert producer.statuses[700:] == ["spooled"] * 300
    producer.thread.join(10)
    postgres.start()
    return producer


def ledger_rows(url: str) -> list[tuple[int, str, str]]:
    """(id, args, state) of every job, by id."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT id, args, state FROM jobs ORDER BY id")).all()
        return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]
    finally:
        engine.dispose()


def check_exactly_once(producer: Producer, url: str) -> None:
    """Every job exists once, in the producer's order, succeeded, and ran once."""
    rows = ledger_rows(url)
    numbers = [json.loads(args)["args"][0] for _, args, _ in rows]
    assert numbers == list(range(JOBS))  # each once, created in enqueue order
    assert {state for _, _, state in rows} == {"succeeded"}
    assert producer.runs == Counter(range(JOBS))


def test_redis_spool_carries_enqueues_through_a_database_crash(
    postgres: Database, redis_server: RedisServer
) -> None:
    app = LedgerQ(database_url=postgres.url, redis_url=redis_server.url, spool="redis")
    try:
        producer = enqueue_through_outages(app, postgres)
        assert Counter(producer.statuses).keys() <= {"created", "spooled"}
        with redis_server.client() as conn:
            assert conn.smembers("ledgerq:0:spool:producers")  # the last 300 wait
        # The worker's spool drainer replays what is left; its fetcher runs every job.
        with running_worker(app, poll_interval_seconds=0.05):
            wait_until(lambda: sum(producer.runs.values()) >= JOBS, timeout=60, what="all ran")
            wait_until(
                lambda: {s for _, _, s in ledger_rows(postgres.url)} == {"succeeded"},
                what="every job recorded succeeded",
            )
        check_exactly_once(producer, postgres.url)
        with redis_server.client() as conn:
            assert not [k for k in conn.keys("ledgerq:*spool:*") if b"hold" not in k]
    finally:
        app.close()


def test_file_spool_carries_enqueues_through_a_database_crash(
    postgres: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = tmp_path / "spool"
    app = LedgerQ(database_url=postgres.url, spool=f"file:{folder}")
    try:
        producer = enqueue_through_outages(app, postgres)
        # Entries the producer did not replay itself wait in the folder; the CLI drains them.
        monkeypatch.setenv("LEDGERQ_DATABASE_URL", postgres.url)
        monkeypatch.setenv("LEDGERQ_SPOOL", f"file:{folder}")
        capsys.readouterr()
        assert main(["spool", "status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["jobs"] == 300
        assert main(["spool", "drain", "--json"]) == 0
        drained = json.loads(capsys.readouterr().out)
        assert drained["left"] == 0 and drained["replayed"] == 300
        assert main(["spool", "status", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["jobs"] == 0
        with running_worker(app, poll_interval_seconds=0.05):
            wait_until(lambda: sum(producer.runs.values()) >= JOBS, timeout=60, what="all ran")
            wait_until(
                lambda: {s for _, _, s in ledger_rows(postgres.url)} == {"succeeded"},
                what="every job recorded succeeded",
            )
        check_exactly_once(producer, postgres.url)
        assert not any(folder.rglob("*.json"))
    finally:
        app.close()


def test_without_a_spool_enqueue_fails_at_once(postgres: Database) -> None:
    app = LedgerQ(database_url=postgres.url)
    try:

        @app.task()
        def record(ctx: JobContext, n: int) -> None:
            del ctx, n

        assert record.enqueue(1).status == "created"
        postgres.stop_immediately()
        for _ in range(3):  # the pooled connection's failure, then refused connections
            started = time.monotonic()
            with pytest.raises(errors.StoreUnavailable) as caught:
                record.enqueue(2)
            assert time.monotonic() - started < 2.0
            assert not isinstance(caught.value, errors.SpoolUnavailable)
        with pytest.raises(errors.StoreUnavailable):
            record.enqueue_many([(3,), (4,)])
    finally:
        app.close()


def test_a_spooled_handle_has_no_id(postgres: Database, tmp_path: Path) -> None:
    app = LedgerQ(database_url=postgres.url, spool=f"file:{tmp_path / 'spool'}")
    try:

        @app.task()
        def record(ctx: JobContext, n: int) -> None:
            del ctx, n

        postgres.stop_immediately()
        handle = record.enqueue(1)
        assert isinstance(handle, SpooledHandle) and handle.status == "spooled"
        assert handle.key.startswith("spool:")
        with pytest.raises(errors.JobSpooled):
            _ = handle.job_id
        with pytest.raises(errors.JobSpooled):
            handle.wait(1)
        many = record.enqueue_many([(2,), (3,)])
        assert [h.status for h in many] == ["spooled", "spooled"]
        assert app.client.spooler is not None
        assert app.client.spooler.spool.size(app.client.spooler.producer) == 2
    finally:
        app.close()


def test_the_enqueue_command_reports_a_spooled_job(
    postgres: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = f"spool_cli_app_{secrets.token_hex(4)}"
    (tmp_path / f"{module}.py").write_text(
        "from ledgerq import LedgerQ\n"
        "app = LedgerQ()\n"
        "@app.task(name='ping')\n"
        "def ping(ctx, n: int) -> None: ...\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", postgres.url)
    monkeypatch.setenv("LEDGERQ_SPOOL", f"file:{tmp_path / 'spool'}")
    postgres.stop_immediately()
    argv = ["--app", f"{module}:app", "job", "enqueue", "ping", "--args", "[1]"]
    assert main([*argv, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "spooled" and shown["id"] is None
    assert shown["key"].startswith("spool:")
    assert main(argv) == 0
    assert "job spooled" in capsys.readouterr().out
    assert len(list((tmp_path / "spool").rglob("*.json"))) == 2


def test_a_transactional_enqueue_is_never_spooled(postgres: Database, tmp_path: Path) -> None:
    app = LedgerQ(database_url=postgres.url, spool=f"file:{tmp_path / 'spool'}")
    try:

        @app.task()
        def record(ctx: JobContext, n: int) -> None:
            del ctx, n

        with app.engine.connect() as conn:
            conn.begin()
            postgres.stop_immediately()
            with pytest.raises(errors.StoreUnavailable):
                record.enqueue(1, tx=conn)
        assert not list((tmp_path / "spool").rglob("*.json"))
    finally:
        app.close()
