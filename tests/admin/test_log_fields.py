"""JSON log lines as the seeds' log pipelines read them (Logstash: ``[level] == "ERROR"``,
``%{[component]}``, ``%{[message]}``): a real worker process with JSON logs, running its
reconciler and scheduler beside it, writes only JSON lines, each with an upper-case level, a
component naming the part that wrote it, and the text as ``message``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
APP = """
from ledgerq import JobContext, LedgerQ

app = LedgerQ()


@app.periodic(cron="* * * * * *", name="every-second")
@app.task(name="logs.doomed", max_attempts=1)
def doomed(ctx: JobContext) -> None:
    raise RuntimeError("doomed by design")
"""


def test_a_worker_writes_json_lines_with_component_and_upper_case_level(
    make_database_url: Any, tmp_path: Path
) -> None:
    (tmp_path / "logapp.py").write_text(textwrap.dedent(APP))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "LEDGERQ_DATABASE_URL": make_database_url("sqlite"),
        "LEDGERQ_LOG_FORMAT": "json",
        "LEDGERQ_POLL_INTERVAL": "0.05",
        "LEDGERQ_RECONCILE_INTERVAL": "0.2",
        "LEDGERQ_RETENTION_FAILED": "0.001",
    }
    log = tmp_path / "worker.log"
    command = [sys.executable, "-m", "ledgerq.cli.main", "--app", "logapp:app", "worker"]
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [*command, "start", "--scheduler"], cwd=tmp_path, env=env, stderr=stderr
        )
    try:

        def events() -> set[str]:
            return {line.get("event", "") for line in parse(log.read_text())}

        wanted = {"tick fired", "job dead", "reconcile pass"}
        wait_until(lambda: wanted <= events(), timeout=30, what=f"{wanted} logged")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-2000:]
    text = log.read_text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert all(line.startswith("{") for line in lines), text[-2000:]
    records = parse(text)
    assert {r["level"] for r in records} <= LEVELS
    assert all(r["message"] == r["event"] for r in records)
    component = {r["event"]: r["component"] for r in records}
    assert component["worker starting"] == "worker"
    assert component["tick fired"] == "scheduler"
    assert component["reconcile pass"] == "reconciler"
    dead = next(r for r in records if r["event"] == "job dead")
    assert dead["level"] == "WARNING" and dead["component"] == "worker"
    assert dead["task"] == "logs.doomed" and "doomed by design" in dead["error"]


def parse(text: str) -> list[dict[str, Any]]:
    """The complete JSON lines of a log (a line being written may be cut off)."""
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
