"""Prometheus metrics: the exposition parses and matches the ledger; several processes add
up in multiprocess mode; a worker's --health-port serves /health/live and /metrics."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ledgerq.core.states import JobState
from tests.admin.conftest import ADMIN, READ, Served
from tests.helpers import running_worker, wait_until
from tests.redis_server import RedisServer

CLI = (sys.executable, "-m", "ledgerq.cli.main")
ROOT = Path(__file__).resolve().parents[2]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@contextlib.contextmanager
def health_worker(url: str, tmp_path: Path, *args: str, **env: str) -> Iterator[str]:
    """A ``worker start --health-port 0`` subprocess of the admin tasks on ``url``; yields the
    base URL of its health server and stops it gracefully (exit 0) at the end."""
    full_env = {**os.environ, "LEDGERQ_DATABASE_URL": url, "LEDGERQ_LOG_FORMAT": "json", **env}
    full_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "worker.log"
    command = [*CLI, "--app", "tests.admin.tasks_app:app", "worker", "start", "--health-port", "0"]
    with log.open("w") as stderr:
        proc = subprocess.Popen([*command, *args], cwd=ROOT, env=full_env, stderr=stderr)
    try:
        found = wait_until(
            lambda: re.search(r'"port": (\d+)', log.read_text()), what="health port logged"
        )
        yield f"http://127.0.0.1:{found.group(1)}"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-2000:]


def test_scrape_parses_and_matches_the_database(served: Served) -> None:
    for n in range(4):
        body = {"task": "admin.add", "args": [n, 1]}
        assert served.client.post("/api/v1/jobs", json=body, headers=ADMIN).status_code == 201
    body = {"task": "admin.boom", "queue": "mail"}
    assert served.client.post("/api/v1/jobs", json=body, headers=ADMIN).status_code == 201
    scraped = samples(served.client.get("/metrics", headers=READ).text)
    counts = served.app.client.store.count_jobs()
    for queue in ("default", "mail"):
        assert (
            scraped[("queue_length", (("queue_name", queue),))] == counts[(queue, JobState.QUEUED)]
        )
        assert ("queue_latency_seconds", (("queue_name", queue),)) in scraped
    assert scraped[("jobs_enqueued_total", (("queue", "default"),))] == 4
    assert scraped[("workers_active", ())] == 0
    assert scraped[("db_connection_pool_max", ())] >= 0
    assert scraped[("transport_fallback_active", ())] == 0

    from ledgerq.core.fleet import Registration

    served.app.client.store.claim_jobs(
        queues=["default"], worker_id="w-1", limit=2, lease_seconds=30
    )
    served.app.parts.fleet.register_worker(Registration("w-1", "h", 1, ("default",), 2, "t"))
    scraped = samples(served.client.get("/metrics", headers=READ).text)
    assert scraped[("queue_length", (("queue_name", "default"),))] == 2
    assert scraped[("workers_active", ())] == 1
    assert scraped[("failover_events_total", ())] == 0


def test_worker_events_count_processed_jobs(served_sqlite: Served) -> None:
    from ledgerq.metrics.prometheus import MetricsHub

    app = served_sqlite.app
    app.migrate()
    hub = MetricsHub()
    app.client.enqueue([app.client.build("admin.add", [1, 2]) for _ in range(3)])
    app.client.enqueue([app.client.build("admin.boom")])
    with running_worker(
        app, events=hub.sink, queues=("default", "mail"), poll_interval_seconds=0.05
    ):
        wait_until(
            lambda: (
                len(app.client.list(state=JobState.SUCCEEDED)) == 3
                and len(app.client.list(state=JobState.DEAD)) == 1
            ),
            what="jobs finished",
        )

        def rendered() -> str | None:
            text = hub.render()[0].decode()
            return text if "admin.boom" in text else None

        text = wait_until(rendered, what="dead job counted")
    scraped = samples(text)
    ok = (("outcome", "succeeded"), ("queue", "default"), ("task", "admin.add"))
    dead = (("outcome", "dead"), ("queue", "mail"), ("task", "admin.boom"))
    assert scraped[("jobs_processed_total", ok)] == 3
    assert scraped[("jobs_processed_total", dead)] == 1
    count = (("queue", "default"), ("task", "admin.add"))
    assert scraped[("job_duration_seconds_count", count)] == 3


def test_multiprocess_mode_adds_up_every_process(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from ledgerq.core.operations import JobFinished
        from ledgerq.metrics.prometheus import MetricsHub
        hub = MetricsHub()
        for _ in range(int(sys.argv[1])):
            hub.sink.emit(JobFinished("q", "t", "succeeded", 0.01))
        if sys.argv[2] == "render":
            sys.stdout.write(hub.render()[0].decode())
        """
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n in (2, 3):
        subprocess.run([sys.executable, "-c", script, str(n), "-"], env=env, check=True)
    out = subprocess.run(
        [sys.executable, "-c", script, "4", "render"], env=env, check=True, capture_output=True
    ).stdout.decode()
    labels = (("outcome", "succeeded"), ("queue", "q"), ("task", "t"))
    assert samples(out)[("jobs_processed_total", labels)] == 9


def test_worker_health_port_serves_live_and_metrics(
    make_database_url: object, tmp_path: Path
) -> None:
    url = make_database_url("sqlite")  # type: ignore[operator]
    from tests.admin.tasks_app import make_app

    app = make_app(database_url=url)
    app.client.enqueue([app.client.build("admin.add", [1, 2]) for _ in range(2)])
    labels = (("outcome", "succeeded"), ("queue", "default"), ("task", "admin.add"))
    try:
        with health_worker(url, tmp_path, "--poll-interval", "0.05") as base:
            with urllib.request.urlopen(f"{base}/health/live", timeout=5) as live:
                assert live.status == 200
            wait_until(
                lambda: len(app.client.list(state=JobState.SUCCEEDED)) == 2, what="jobs done"
            )

            def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
                with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
                    return samples(response.read().decode())

            assert wait_until(
                lambda: scrape().get(("jobs_processed_total", labels), 0) == 2.0,
                what="processed jobs scraped",
            )
            assert ("worker_cpu_usage_percent", ()) in scrape()
    finally:
        app.close()


def test_reconciler_and_dropped_hints_are_counted() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from ledgerq.core.operations import HintsDropped, ReconcilePassed
    from ledgerq.metrics.prometheus import PrometheusSink

    registry = CollectorRegistry()
    sink = PrometheusSink(registry)
    sink.emit(ReconcilePassed((("announced", 3), ("stuck_requeued", 0), ("deleted_expired", 2))))
    sink.emit(ReconcilePassed((("announced", 4),)))
    sink.emit(HintsDropped(5))
    found = samples(generate_latest(registry).decode())
    assert found[("reconciler_actions_total", (("action", "announced"),))] == 7
    assert found[("reconciler_actions_total", (("action", "deleted_expired"),))] == 2
    assert ("reconciler_actions_total", (("action", "stuck_requeued"),)) not in found
    assert found[("transport_hints_dropped_total", ())] == 5


def test_worker_reports_transport_fallback_while_redis_is_down(
    make_database_url: object, tmp_path: Path, redis_server: RedisServer
) -> None:
    url = make_database_url("sqlite")  # type: ignore[operator]
    redis_env = {"LEDGERQ_REDIS_URL": redis_server.url}
    with health_worker(url, tmp_path, "--poll-interval", "0.2", **redis_env) as base:

        def fallback() -> float:
            with urllib.request.urlopen(f"{base}/metrics", timeout=5) as response:
                return samples(response.read().decode())[("transport_fallback_active", ())]

        assert fallback() == 0
        redis_server.kill()
        wait_until(lambda: fallback() == 1, timeout=10, what="fallback reported")
        redis_server.start()
        wait_until(lambda: fallback() == 0, timeout=20, what="back on Redis")


def test_jobs_of_unknown_tasks_are_counted_by_outcome() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from ledgerq.core.operations import UnknownTaskSeen
    from ledgerq.metrics.prometheus import PrometheusSink

    registry = CollectorRegistry()
    sink = PrometheusSink(registry)
    for outcome in ("deferred", "deferred", "buried"):
        sink.emit(UnknownTaskSeen("q", "new.task", outcome))
    found = samples(generate_latest(registry).decode())
    labels = (("outcome", "deferred"), ("queue", "q"), ("task", "new.task"))
    assert found[("jobs_unknown_task_total", labels)] == 2
    labels = (("outcome", "buried"), ("queue", "q"), ("task", "new.task"))
    assert found[("jobs_unknown_task_total", labels)] == 1
