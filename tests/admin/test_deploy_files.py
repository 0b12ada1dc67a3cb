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


def health_hosts(command: list[str] | str) -> list[str]:
    """The values given to --health-host in a command (a list or a shell-like string)."""
    words = command.split() if isinstance(command, str) else command
    return [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--health-host"]


def test_compose_redis_needs_a_password_and_nothing_internal_is_exposed() -> None:
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    redis_command = services["redis"]["command"]
    assert "--requirepass" in redis_command
    password = redis_command[redis_command.index("--requirepass") + 1]
    assert password.startswith("${REDIS_PASSWORD:?"), password  # from the environment, required
    assert "${REDIS_PASSWORD" in services["worker"]["environment"]["LEDGERQ_REDIS_URL"]
    # The database and Redis publish no port and sit on a network with no way out.
    for name in ("postgres", "redis"):
        assert "ports" not in services[name]
        assert list(services[name]["networks"]) == ["backend"]
    assert compose["networks"]["backend"]["internal"] is True


def test_health_ports_bind_loopback_by_default() -> None:
    compose = yaml.safe_load((DEPLOY / "docker" / "compose.yaml").read_text())
    for name, service in compose["services"].items():
        for host in health_hosts(service.get("command", [])):
            assert host in ("127.0.0.1", "${WORKER_HEALTH_HOST:-127.0.0.1}"), name
    dockerfile = (DEPLOY / "docker" / "Dockerfile").read_text()
    (cmd,) = [line for line in dockerfile.splitlines() if line.startswith("CMD ")]
    assert health_hosts(json.loads(cmd[4:])) in ([], ["127.0.0.1"])
    for path in ("systemd/ledgerq-worker@.service", "supervisor/ledgerq.conf"):
        text = (DEPLOY / path).read_text()
        assert "--health-port" in text and health_hosts(text) in ([], ["127.0.0.1"]), path
