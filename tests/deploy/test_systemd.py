"""The systemd template units run: each unit's ``ExecStart=``, with ``%i`` substituted and its
``EnvironmentFile=`` (the shipped example, pointed at a test database and a free port) as the
whole environment, starts a worker / ``serve`` that turns healthy and stops cleanly on the
unit's ``KillSignal``; ``systemd-analyze verify`` accepts both units."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from tests.deploy.deploy_files import (
    DEPLOY,
    LEDGERQ,
    Services,
    base_env,
    exec_argv,
    http_status,
    need_tool,
    parse_unit,
    read_env_file,
    specifiers,
    unit_value,
    with_local_ledgerq,
)
from tests.helpers import wait_until
from tests.redis_server import free_port

SYSTEMD = DEPLOY / "systemd"
EXAMPLE_ENV = SYSTEMD / "ledgerq.env.example"
INSTANCE = "production"
# unit -> (the environment variable holding its port, the health path that must answer 200)
UNITS = {
    "ledgerq-worker@.service": ("HEALTH_PORT", "/health/live"),
    "ledgerq-serve@.service": ("SERVE_PORT", "/health/ready"),
}


def unit_environment(unit: dict[str, list[tuple[str, str]]], overrides: dict[str, str]) -> dict:
    """The environment systemd gives the unit: its EnvironmentFile (the shipped example in
    place of /etc/ledgerq/<instance>.env) with ``overrides`` for keys the file sets."""
    env_file = specifiers(unit_value(unit, "Service", "EnvironmentFile"), INSTANCE)
    assert env_file == f"/etc/ledgerq/{INSTANCE}.env"
    settings = read_env_file(EXAMPLE_ENV.read_text())
    assert set(overrides) <= set(settings), "the example file must set what the test overrides"
    return base_env(**{**settings, **overrides})


@pytest.mark.parametrize("unit_name", sorted(UNITS))
def test_unit_runs_healthy_with_its_environment_file(
    unit_name: str, pg_url: str, app_dir: Path, services: Services
) -> None:
    unit = parse_unit((SYSTEMD / unit_name).read_text())
    port_variable, health_path = UNITS[unit_name]
    port = free_port()
    env = unit_environment(unit, {"LEDGERQ_DATABASE_URL": pg_url, port_variable: str(port)})
    argv = exec_argv(unit_value(unit, "Service", "ExecStart"), env, INSTANCE)
    assert str(port) in argv  # the port variable reached the command line
    assert unit_value(unit, "Service", "WorkingDirectory") == "/opt/ledgerq/app"
    assert unit_value(unit, "Service", "Type") == "simple"

    proc = services.start(with_local_ledgerq(argv), env=env, cwd=app_dir)
    url = f"http://127.0.0.1:{port}{health_path}"
    wait_until(
        lambda: http_status(url) == 200 or proc.poll() is not None, timeout=30, what="healthy"
    )
    assert proc.poll() is None, services.log(proc)
    assert http_status(url) == 200

    kill_signal = dict(unit["Service"]).get("KillSignal", "SIGTERM")
    assert kill_signal == "SIGTERM"  # what Services.stop sends
    code = services.stop(proc, timeout=30)
    # A clean stop: 0, or re-raised SIGTERM, which systemd counts as success for SIGTERM.
    assert code in (0, -signal.SIGTERM), services.log(proc)
    log = services.log(proc)
    assert "unknown setting" not in log and "Traceback" not in log, log


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """``systemd-analyze verify`` on an instance of each template, in a copy whose only change
    is the path of the ledgerq binary (verify checks that ExecStart's program exists)."""
    analyze = need_tool("systemd-analyze")
    for name in UNITS:
        text = (SYSTEMD / name).read_text()
        assert text.count("/opt/ledgerq/venv/bin/ledgerq ") == 1
        (tmp_path / name).write_text(text.replace("/opt/ledgerq/venv/bin/ledgerq ", f"{LEDGERQ} "))
        instance = tmp_path / name.replace("@.", f"@{INSTANCE}.")
        result = subprocess.run(
            [analyze, "verify", "--man=no", str(instance)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if result.returncode != 0 and "Failed to initialize" in result.stderr:
            pytest.skip(f"systemd-analyze cannot run here: {result.stderr.strip()}")
        # verify only warns (exit 0) about unknown keys or bad values: any output is a finding.
        assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), (
            name,
            result.stdout + result.stderr,
        )
