"""A worker's own health port: the health check metrics count the checks its registrar
records in ``worker_health_checks`` (not probe hits), ``/health/ready`` fails for a worker that
is alive but not consuming, the pool gauges are its own, and every metric the shipped alert
rules use is exported by a real worker or ``serve`` (so rules and exporters cannot drift)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ledgerq.store.engine import create_engine
from tests.admin.conftest import READ, Served
from tests.admin.tasks_app import make_app
from tests.admin.test_deploy_files import DEPLOY, metric_names
from tests.admin.test_metrics import health_worker
from tests.helpers import wait_until

FAST_CHECKS = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "0.2",
    "LEDGERQ_WORKER_HEALTH_CHECK_INTERVAL": "0.2",
}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(url: str) -> tuple[int, dict[str, Any] | str]:
    """Status and body (JSON when it is) of a GET."""
    import json

    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def scrape(base: str) -> Samples:
    text = get(f"{base}/metrics")[1]
    assert isinstance(text, str)
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def ready_body(base: str) -> dict[str, Any] | None:
    """The body of a 200 from ``/health/ready`` (None until it answers 200: a worker is not
    ready before its first registration)."""
    status, body = get(f"{base}/health/ready")
    return body if status == 200 and isinstance(body, dict) else None


def checks_counted(samples: Samples) -> float:
    ok = samples.get(("worker_health_checks_total", (("status", "ok"),)), 0.0)
    return ok + samples.get(("worker_health_checks_total", (("status", "failed"),)), 0.0)


def exported(text: object) -> set[str]:
    """Every metric name of an exposition: its families' (a gauge with no sample yet, such
    as ``queue_length`` of an empty ledger, still declares itself) and its samples'."""
    assert isinstance(text, str)
    families = list(text_string_to_metric_families(text))
    counters = {f"{f.name}_total" for f in families if f.type == "counter"}
    return {f.name for f in families} | counters | {s.name for f in families for s in f.samples}


def test_health_check_metrics_count_the_recorded_checks_not_probe_hits(
    make_database_url: Any, tmp_path: Path
) -> None:
    url = make_database_url("postgresql")
    engine = create_engine(url)
    recorded = sa.text("SELECT count(*) FROM worker_health_checks")
    try:
        with health_worker(url, tmp_path, "--poll-interval", "0.05", **FAST_CHECKS) as base:
            ready = wait_until(lambda: ready_body(base), what="the worker ready")
            assert {name for name, c in ready["checks"].items() if c["ok"]} == {
                "running",
                "database",
                "consuming",
            }
            wait_until(lambda: checks_counted(scrape(base)) >= 3, what="three checks counted")
            for _ in range(30):  # probes are not health checks
                assert get(f"{base}/health/live")[0] == 200
            before = checks_counted(scrape(base))
            with engine.connect() as conn:
                rows = conn.execute(recorded).scalar_one()
            after = checks_counted(scrape(base))
            # A check is recorded, then counted: at most one is between the two.
            assert before <= rows <= after + 1, (before, rows, after)
            samples = scrape(base)
            assert samples[("worker_health_checks_failed_total", ())] == 0
            # Its own pool: SPEC 8's two gauges and the pool's size and overflow.
            assert (
                samples[("db_connection_pool_max", ())]
                >= samples[("db_connection_pool_size", ())]
                > 0
            )
            assert samples[("db_connection_pool_active", ())] >= 0
            assert samples[("db_connection_pool_overflow", ())] >= 0
    finally:
        engine.dispose()


def test_a_worker_alive_but_not_consuming_is_unready_and_fails_its_checks(
    make_database_url: Any, tmp_path: Path
) -> None:
    url = make_database_url("sqlite")
    app = make_app(database_url=url)
    try:
        # One slot, no prefetch: while the slow job holds the slot nothing is fetched, and
        # the job behind it waits.
        app.client.enqueue([app.client.build("admin.slow", [60])])
        app.client.enqueue([app.client.build("admin.add", [1, 2])])
        options = ("--poll-interval", "0.05", "--concurrency", "1", "--prefetch", "0")
        options += ("--grace", "0.2")  # the slow job is put back at the stop
        with health_worker(url, tmp_path, *options, **FAST_CHECKS) as base:
            wait_until(lambda: ready_body(base), what="the worker ready at first")

            def unready() -> dict[str, Any] | None:
                status, body = get(f"{base}/health/ready")
                return body if status == 503 and isinstance(body, dict) else None

            body = wait_until(unready, what="the stalled worker unready")
            assert body["checks"]["consuming"]["ok"] is False
            assert body["checks"]["running"]["ok"] is True
            assert get(f"{base}/health/live")[0] == 200  # alive, though
            wait_until(
                lambda: scrape(base).get(("worker_health_checks_failed_total", ()), 0) >= 1,
                what="a failed health check counted",
            )
            failed = scrape(base)[("worker_health_checks_total", (("status", "failed"),))]
            assert failed >= 1
    finally:
        app.close()


def test_every_metric_the_alert_rules_use_is_exported(
    make_database_url: Any, tmp_path: Path, served_sqlite: Served
) -> None:
    url = make_database_url("sqlite")
    app = make_app(database_url=url)
    try:
        app.client.enqueue([app.client.build("admin.add", [1, 2]), app.client.build("admin.boom")])
        with health_worker(url, tmp_path, "--queues", "default,mail", **FAST_CHECKS) as base:
            wait_until(
                lambda: (
                    checks_counted(scrape(base)) >= 1
                    and any(n == "jobs_processed_total" for n, _ in scrape(base))
                ),
                what="a job and a health check counted",
            )
            worker = exported(get(f"{base}/metrics")[1])
    finally:
        app.close()
    serve = exported(served_sqlite.client.get("/metrics", headers=READ).text)
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"]
    used = {
        name: rule["alert"]
        for group in rules
        for rule in group["rules"]
        for name in metric_names(rule["expr"])
    }
    used.pop("up")  # Prometheus's own, per scrape target
    missing = {name: alert for name, alert in used.items() if name not in worker | serve}
    assert not missing, missing
    # A worker exports what its own alerts read.
    for name in (
        "worker_health_checks_failed_total",
        "db_connection_pool_active",
        "db_connection_pool_max",
        "transport_fallback_active",
        "jobs_processed_total",
    ):
        assert name in worker, name
