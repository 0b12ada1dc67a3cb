"""The shipped alert rules fire when their condition is true: ``promtool test rules`` runs
deploy/prometheus/alerts_test.yml (a stalled worker, a down worker, a backlog, waiting jobs
with no worker, a failed-over worker, an exhausted pool, Redis down, serve down, dying jobs),
and every rule has a test in which it fires."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from tests.admin.test_deploy_files import DEPLOY

RULES = DEPLOY / "prometheus"


def promtool() -> str:
    """The promtool binary (Debian package prometheus); skips locally, fails under CI."""
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is not installed (apt-get install prometheus)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def run(*args: str) -> str:
    done = subprocess.run(
        [promtool(), *args], cwd=RULES, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_accepts_the_rules() -> None:
    assert "SUCCESS" in run("check", "rules", "alerts.yml")


def test_each_alert_fires_in_its_promtool_unit_test() -> None:
    assert "SUCCESS" in run("test", "rules", "alerts_test.yml")
    rules = yaml.safe_load((RULES / "alerts.yml").read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tests = yaml.safe_load((RULES / "alerts_test.yml").read_text())
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert fired == alerts, f"alerts never shown firing: {alerts - fired}"
