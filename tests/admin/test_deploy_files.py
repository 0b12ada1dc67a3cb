"""The deployment files parse, and every metric they use is one ledgerq exports (SPEC 8)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
EXPORTED = {
    "jobs_enqueued_total",
    "jobs_processed_total",
    "job_duration_seconds_bucket",
    "queue_length",
    "queue_latency_seconds",
    "worker_health_checks_total",
    "worker_health_checks_failed_total",
    "workers_active",
    "failover_events_total",
    "worker_cpu_usage_percent",
    "db_connection_pool_active",
    "db_connection_pool_max",
    "transport_fallback_active",
    "up",
}
PROMQL_WORDS = {"sum", "max", "by", "rate", "increase", "and", "on", "histogram_quantile", "le"}


def metric_names(expr: str) -> set[str]:
    """Identifiers of a PromQL expression that are not functions, keywords or labels."""
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", "", expr)
    expr = re.sub(r"\b(by|without|on)\s*\([^)]*\)", "", expr)
    return {w for w in re.findall(r"[a-z_][a-z0-9_]*", expr) if w not in PROMQL_WORDS}


def test_alerts_use_exported_metrics_only() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"][0]
    names = {rule["alert"] for rule in rules["rules"]}
    assert {
        "LedgerqWorkerDown",
        "LedgerqBacklogHigh",
        "LedgerqHealthChecksFailing",
        "LedgerqDbPoolNearExhaustion",
    } <= names
    for rule in rules["rules"]:
        assert metric_names(rule["expr"]) <= EXPORTED, rule["alert"]
        assert rule["annotations"]["summary"]


def test_grafana_dashboard_uses_exported_metrics_only() -> None:
    board = json.loads((DEPLOY / "grafana" / "ledgerq-dashboard.json").read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel["targets"]]
    assert exprs
    for expr in exprs:
        assert metric_names(expr) <= EXPORTED, expr


def test_compose_scales_workers_without_fixed_names() -> None:
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert {"worker", "serve", "migrate", "postgres"} <= set(services)
    assert all("container_name" not in s for s in services.values())
    assert "ports" not in services["worker"]
    assert all(p.startswith("127.0.0.1:") for p in services["serve"]["ports"])
    assert yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())


def test_unit_files_stop_gracefully() -> None:
    unit = (DEPLOY / "systemd" / "ledgerq-worker@.service").read_text()
    assert "KillSignal=SIGTERM" in unit and "EnvironmentFile=/etc/ledgerq/%i.env" in unit
    supervisor = (DEPLOY / "supervisor" / "ledgerq.conf").read_text()
    assert "stopsignal=TERM" in supervisor and "numprocs=" in supervisor
