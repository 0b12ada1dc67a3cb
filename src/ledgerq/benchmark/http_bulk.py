"""HTTP bulk enqueue beside ``enqueue_many``: the same jobs in the same chunks, once through the
Python API and once through ``POST /api/v1/jobs/bulk`` of a real ``ledgerq serve`` process
(one keep-alive connection): with the admin token, with a producer token, and with a
producer token plus an ``Idempotency-Key`` per request. Prints one JSON line per trial.

    python -m ledgerq.benchmark.http_bulk --database-url postgresql://... [--jobs 10000]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ledgerq.app.application import LedgerQ

ADMIN_TOKEN = "bench-admin-token-0123456789"
PRODUCER_TOKEN = "bench-producer-token-0123456789"


def make_app(**settings: Any) -> tuple[LedgerQ, Any]:
    """An application with the one task the benchmark enqueues (nothing runs it)."""
    made = LedgerQ(**settings)

    @made.task(name="bench.charge", queue="bench")
    def charge(ctx: object, account: int, cents: int) -> None:
        """Charge an account (never run here)."""

    return made, charge


#: What ``ledgerq --app ledgerq.benchmark.http_bulk:app serve`` serves.
app, _ = make_app()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _python_api(task: Any, jobs: int, chunk: int) -> float:
    started = time.perf_counter()
    for start in range(0, jobs, chunk):
        task.enqueue_many([(i, 100) for i in range(start, min(start + chunk, jobs))])
    return time.perf_counter() - started


def _over_http(port: int, jobs: int, chunk: int, headers: Callable[[int], dict[str, str]]) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    started = time.perf_counter()
    for n, start in enumerate(range(0, jobs, chunk)):
        items = [
            {"task": "bench.charge", "args": [i, 100]}
            for i in range(start, min(start + chunk, jobs))
        ]
        body = json.dumps({"jobs": items})
        conn.request("POST", "/api/v1/jobs/bulk", body, headers(n))
        response = conn.getresponse()
        answer = response.read()
        if response.status != 201:
            raise SystemExit(f"bulk request answered {response.status}: {answer[:300]!r}")
    elapsed = time.perf_counter() - started
    conn.close()
    return elapsed


def _serve(database_url: str) -> tuple[subprocess.Popen[bytes], int]:
    port = _free_port()
    env = {
        **os.environ,
        "LEDGERQ_DATABASE_URL": database_url,
        "LEDGERQ_API_TOKEN": ADMIN_TOKEN,
        "LEDGERQ_API_PRODUCER_TOKEN": f"bench:{PRODUCER_TOKEN}",
        "LEDGERQ_LOG_LEVEL": "WARNING",
    }
    command = [sys.executable, "-m", "ledgerq.cli.main", "--app"]
    command += ["ledgerq.benchmark.http_bulk:app", "serve", "--port", str(port)]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", "/health/live")
            if conn.getresponse().status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
    proc.terminate()
    raise SystemExit("ledgerq serve did not start")


def run(argv: Sequence[str] | None = None) -> int:
    """Measure and print one JSON line per method and trial."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=500)
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    migrate = [sys.executable, "-m", "ledgerq.cli.main", "db", "migrate"]
    env = {**os.environ, "LEDGERQ_DATABASE_URL": args.database_url}
    subprocess.run(migrate, env=env, check=True, stdout=subprocess.DEVNULL)
    local, task = make_app(database_url=args.database_url)
    proc, port = _serve(args.database_url)
    stamp = time.time_ns()

    def admin(_n: int) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}

    def producer(_n: int) -> dict[str, str]:
        return {"Authorization": f"Bearer {PRODUCER_TOKEN}", "Content-Type": "application/json"}

    def idempotent(n: int) -> dict[str, str]:
        return {**producer(n), "Idempotency-Key": f"bench-{stamp}-{n}"}

    methods: dict[str, Callable[[], float]] = {
        "enqueue_many": lambda: _python_api(task, args.jobs, args.chunk),
        "http_bulk_admin": lambda: _over_http(port, args.jobs, args.chunk, admin),
        "http_bulk_producer": lambda: _over_http(port, args.jobs, args.chunk, producer),
        "http_bulk_producer_idempotent": lambda: _over_http(
            port, args.jobs, args.chunk, idempotent
        ),
    }
    try:
        for trial in range(1, args.trials + 1):
            for name, measure in methods.items():
                if name == "http_bulk_producer_idempotent":
                    stamp += 1  # fresh keys each trial
                seconds = measure()
                line: dict[str, Any] = {
                    "method": name,
                    "trial": trial,
                    "jobs": args.jobs,
                    "chunk": args.chunk,
                    "seconds": round(seconds, 3),
                    "jobs_per_second": round(args.jobs / seconds),
                }
                print(json.dumps(line), flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
        local.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
