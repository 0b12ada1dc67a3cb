"""Worker processes on the redis driver against real Redis servers the tests start on their own
ports: Redis flushed or killed mid-run, ids pushed five times to racing workers, a producer
that dies between commit and push, an evicting Redis, and ``--driver dbpoll``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgerq.core.job import JobHint
from ledgerq.transport.redis import RedisTransport
from tests.acceptance import effects_app
from tests.acceptance.conftest import REPO_ROOT, Ledger, Procs, cli_env
from tests.helpers import wait_until
from tests.redis_server import RedisServer

pytestmark = pytest.mark.timeout(300)

Make = Callable[[str], Ledger]


def redis_env(server: RedisServer, namespace: str, **extra: str) -> dict[str, str]:
    env = {
        "LEDGERQ_REDIS_URL": server.url,
        "LEDGERQ_NAMESPACE": namespace,
        "LEDGERQ_RECONCILE_INTERVAL": "1",
        "LEDGERQ_REQUEUE_AFTER": "1",
    }
    env.update(extra)
    return env


def producer(db: Ledger, server: RedisServer, namespace: str) -> effects_app.EffectsApp:
    return effects_app.make_app(database_url=db.url, redis_url=server.url, namespace=namespace)


def succeeded(db: Ledger) -> int:
    return db.states().get("succeeded", 0)


def stop_all(workers: list) -> None:  # type: ignore[type-arg]
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.log()[-3000:]


def assert_exactly_once(db: Ledger, keys: set[str]) -> None:
    assert db.failures() == {}
    assert set(db.effect_rows()) == keys
    assert db.duplicate_rows() == []
    assert {row.attempt for row in db.jobs().values()} == {1}


def test_flushall_mid_run_loses_nothing(
    ledger: Make, procs: Procs, redis_server: RedisServer
) -> None:
    db = ledger("postgresql")
    app = producer(db, redis_server, "flush")
    keys = [f"k{i:05d}" for i in range(10_000)]
    app.record_effect.enqueue_many([(k,) for k in keys])
    app.app.close()
    env = redis_env(redis_server, "flush")
    workers = [procs.worker(db.url, "--concurrency", "8", env=env) for _ in range(2)]
    wait_until(lambda: succeeded(db) >= 2000, timeout=60, what="2000 jobs done")
    redis_server.flushall()
    flushed_at, done_at_flush = time.monotonic(), succeeded(db)
    # Work goes on within two reconciler intervals (1 s each) of the flush ...
    wait_until(lambda: succeeded(db) >= done_at_flush + 200, timeout=2.0 + 1.0, what="progress")
    # ... and every job finishes, exactly once.
    wait_until(lambda: succeeded(db) == 10_000, timeout=120, what="all 10,000 jobs done")
    print(f"all done {time.monotonic() - flushed_at:.1f} s after the flush")
    stop_all(workers)
    assert_exactly_once(db, set(keys))


def test_redis_killed_mid_run_workers_poll_then_return(
    ledger: Make, procs: Procs, redis_server: RedisServer
) -> None:
    db = ledger("postgresql")
    app = producer(db, redis_server, "kill")
    keys = [f"a{i:04d}" for i in range(3000)]
    app.record_effect.enqueue_many([(k,) for k in keys])
    env = redis_env(redis_server, "kill")
    workers = [procs.worker(db.url, "--concurrency", "8", env=env) for _ in range(2)]
    wait_until(lambda: succeeded(db) >= 500, timeout=60, what="500 jobs done")

    redis_server.kill()
    # Enqueue keeps succeeding while Redis is down (its pushes are skipped, not failed) ...
    client = app.app.client
    assert client.unannounced == 0
    down_keys = [f"b{i:04d}" for i in range(2000)]
    app.record_effect.enqueue_many([(k,) for k in down_keys])
    for k in down_keys[:20]:
        app.record_effect.enqueue(k + "-single")
    assert client.flush_hints(10)
    assert client.unannounced == 2020
    # ... and the workers carry on by polling.
    wait_until(lambda: succeeded(db) >= 5000, timeout=60, what="progress while Redis is down")
    for worker in workers:
        wait_until(
            lambda w=worker: "falling back to polling" in w.log(), timeout=10, what="fallback"
        )

    redis_server.start()
    for worker in workers:
        wait_until(
            lambda w=worker: "back to the redis driver" in w.log(), timeout=30, what="return"
        )
    back_keys = [f"c{i:04d}" for i in range(1000)]
    # The producer probes Redis with backoff too; once it answers, pushes go through again.
    probes: list[str] = []

    def pushed_again() -> bool:
        probes.append(f"probe-{len(probes)}")
        app.record_effect.enqueue(probes[-1])
        return client.flush_hints(10) and client.unannounced == 2020 + len(probes) - 1

    wait_until(pushed_again, timeout=30, what="producer pushing to Redis again")
    skipped = client.unannounced
    app.record_effect.enqueue_many([(k,) for k in back_keys])
    assert client.flush_hints(10)
    assert client.unannounced == skipped  # the new ids really went through Redis
    everything = {*keys, *down_keys, *(k + "-single" for k in down_keys[:20]), *back_keys}
    everything.update(probes)
    wait_until(lambda: succeeded(db) == len(everything), timeout=120, what="all jobs done")
    app.app.close()
    stop_all(workers)
    assert_exactly_once(db, everything)


def test_ids_pushed_five_times_to_four_racing_workers_run_once(
    ledger: Make, procs: Procs, redis_server: RedisServer
) -> None:
    db = ledger("postgresql")
    keys = [f"k{i:04d}" for i in range(2000)]
    # Enqueued without Redis, so every hint the workers see comes from this test.
    ids = [r.job_id for r in db.effects.record_effect.enqueue_many([(k,) for k in keys])]
    hints = [JobHint(job_id, "default", 0) for job_id in ids]
    env = redis_env(
        redis_server,
        "race",
        LEDGERQ_RECONCILE_INTERVAL="600",
        LEDGERQ_POLL_INTERVAL="5",
        LEDGERQ_LOG_LEVEL="DEBUG",  # the stopped worker's counters are a DEBUG line
        LEDGERQ_LOG_JOBS="false",
    )
    pusher = RedisTransport(redis_server.url, namespace="race")
    try:
        pusher.push(hints)
        workers = [procs.worker(db.url, "--concurrency", "4", env=env) for _ in range(4)]
        for _ in range(4):  # four more times each, while the workers take them
            for start in range(0, len(hints), 250):
                pusher.push(hints[start : start + 250])
        with redis_server.client() as raw:
            raw.zadd("race:0:queue:default", {"garbage": 0, "-1": 0, "x" * 30: 0})
        wait_until(lambda: succeeded(db) == 2000, timeout=120, what="all jobs done")
        pusher.push(hints[:100])  # ids of finished jobs
        wait_until(
            lambda: pusher.queue_lengths(["default"])["default"] == 0, timeout=30, what="drained"
        )
    finally:
        pusher.close()
    stop_all(workers)
    assert_exactly_once(db, set(keys))
    logs = "".join(w.log() for w in workers)
    assert logs.count("dropped a malformed job id") == 3
    dropped = sum(int(part.split("=")[1].split()[0]) for part in logs.split("dropped_hints")[1:])
    assert dropped >= 100, "stale ids must be counted"


def test_crash_between_commit_and_push_is_repaired_by_the_reconciler(
    ledger: Make, procs: Procs, redis_server: RedisServer
) -> None:
    db = ledger("sqlite")
    script = (
        "import os\n"
        "from tests.acceptance import effects_app\n"
        f"a = effects_app.make_app(database_url={db.url!r}, redis_url={redis_server.url!r},"
        " namespace='crash')\n"
        "a.app.client.announce = lambda hints: os._exit(3)  # the fault hook, after the commit\n"
        "a.record_effect.enqueue('lost-push')\n"
    )
    crashed = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, env=cli_env(None), timeout=60, check=False
    )
    assert crashed.returncode == 3
    assert db.states() == {"queued": 1}
    key = "crash:0:queue:default"
    with redis_server.client() as raw:
        assert raw.zcard(key) == 0

    env = redis_env(redis_server, "crash", LEDGERQ_REQUEUE_AFTER="0.001")
    repaired = procs.run(db.url, "--json", "reconcile", "--once", env=env)
    assert repaired.returncode == 0, repaired.stderr
    assert json.loads(repaired.stdout)["announced"] == 1
    with redis_server.client() as raw:
        assert raw.zcard(key) == 1
    run = procs.run(db.url, "worker", "start", "--once", "--driver", "redis", env=env)
    assert run.returncode == 0, run.stderr
    assert_exactly_once(db, {"lost-push"})


def test_an_evicting_redis_warns_and_strict_refuses(
    ledger: Make, procs: Procs, tmp_path: Path
) -> None:
    db = ledger("sqlite")
    (tmp_path / "lru").mkdir()
    server = RedisServer(tmp_path / "lru", "--maxmemory-policy", "allkeys-lru")
    try:
        env = redis_env(server, "lru")
        warned = procs.run(db.url, "worker", "start", "--burst", env=env)
        assert warned.returncode == 0, warned.stderr
        assert "maxmemory-policy is 'allkeys-lru'" in warned.stderr
        refused = procs.run(db.url, "worker", "start", "--burst", "--strict", env=env)
        assert refused.returncode == 1
        assert "error: --strict: Redis maxmemory-policy is 'allkeys-lru'" in refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        server.stop()


def test_once_with_dbpoll_runs_one_job_without_redis(ledger: Make, procs: Procs) -> None:
    db = ledger("sqlite")
    db.effects.record_effect.enqueue_many([("one",), ("two",)])
    dead_redis = "redis://127.0.0.1:1/0"  # nothing listens there
    run = procs.run(
        db.url,
        "-v",
        "worker",
        "start",
        "--once",
        "--driver=dbpoll",
        env={"LEDGERQ_REDIS_URL": dead_redis},
    )
    assert run.returncode == 0, run.stderr
    assert db.states() == {"succeeded": 1, "queued": 1}
    assert "Redis" not in run.stderr
