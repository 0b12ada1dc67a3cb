"""``ledgerq serve`` as a real process: it serves with a token, logs changes for audit (never
the token), and stops on SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.admin.conftest import ADMIN_TOKEN
from tests.admin.tasks_app import make_app
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A port that was free a moment ago (the server binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def call(url: str, method: str = "GET", body: object = None, token: str = ADMIN_TOKEN) -> int:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, http.client.HTTPException):  # not listening yet (or a TCP self-connect)
        return 0


def test_serve_process_with_token_and_audit_log(
    make_database_url: Callable[[str], str], tmp_path: Path
) -> None:
    url = make_database_url("sqlite")
    app = make_app(database_url=url)
    port = free_port()
    env = {
        **os.environ,
        "LEDGERQ_DATABASE_URL": url,
        "LEDGERQ_API_TOKEN": ADMIN_TOKEN,
        "LEDGERQ_LOG_FORMAT": "json",
    }
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "ledgerq.cli.main", "--app", "tests.admin.tasks_app:app"]
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [*command, "serve", "--port", str(port)], cwd=ROOT, env=env, stderr=stderr
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: call(f"{base}/health/live") == 200, what="serve answers")
        assert call(f"{base}/health/ready") == 200
        assert call(f"{base}/api/v1/jobs", token="wrong") == 403
        body = {"task": "admin.add", "args": [1, 2]}
        assert call(f"{base}/api/v1/jobs", "POST", body) == 201
        job_id = app.client.list()[0].id
        assert call(f"{base}/api/v1/jobs/{job_id}/cancel", "POST") == 200
        lines = wait_until(
            lambda: [
                json.loads(line)
                for line in log.read_text().splitlines()
                if line.startswith("{") and '"audit"' in line
            ],
            what="audit lines",
        )
        actions = {(line["action"], line["caller"]) for line in lines}
        assert {("enqueue", "admin/bearer"), ("cancel", "admin/bearer")} <= actions
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal (systemd counts it clean).
        assert proc.wait(30) in (0, -signal.SIGTERM), log.read_text()[-2000:]
        app.close()
    assert ADMIN_TOKEN not in log.read_text()
