"""``ledgerq demo`` as a user runs it: a subprocess on a fresh SQLite file whose summary must
show every job finished, the doomed ones dead after all their attempts and the flaky ones
succeeded on a retry; bad options and Ctrl-C end with a clear message, never a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ledgerq import LedgerQ
from ledgerq.core.states import JobState

CLI = (sys.executable, "-m", "ledgerq.cli.main")


def _env() -> dict[str, str]:
    # The caller's LEDGERQ_* settings must not leak into what the demo does.
    return {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}


def _demo(tmp_path: Path, *args: str, timeout: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_demo_finishes_every_job_and_reports_retries_and_dead_jobs(tmp_path: Path) -> None:
    database = tmp_path / "d.db"
    args = ("--jobs", "600", "--processes", "2", "--database", str(database))
    done = _demo(tmp_path, "--json", "demo", *args)

    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    states, tasks = summary["states"], summary["tasks"]
    assert summary["outcome"] == "finished"
    assert summary["jobs"] == 600
    assert states["succeeded"] + states["dead"] == 600
    for unfinished in ("queued", "running", "failed", "scheduled", "held"):
        assert states[unfinished] == 0, unfinished

    doomed = tasks["call_legacy_api"]
    assert doomed["jobs"] >= 1
    assert doomed["dead"] == doomed["jobs"] == states["dead"]
    assert doomed["min_attempts"] == doomed["max_attempts"] == doomed["attempts_allowed"] == 3

    flaky = tasks["sync_inventory"]
    assert flaky["jobs"] >= 2
    assert flaky["succeeded"] == flaky["jobs"]
    assert flaky["min_attempts"] == 2 and flaky["max_attempts"] == 3

    for name in ("send_sms", "make_thumbnail", "render_report"):
        assert tasks[name]["succeeded"] == tasks[name]["jobs"] >= 1, name
        assert tasks[name]["max_attempts"] == 1, name
    assert sum(t["jobs"] for t in tasks.values()) == 600

    assert summary["throughput_jobs_per_second"] > 0
    for kind in ("start", "run"):
        latency = summary["latency_ms"][kind]
        assert 0 <= latency["p50"] <= latency["p90"] <= latency["p99"], kind
    assert (tmp_path / "d.log").read_text().count("worker starting") >= 2


def test_demo_prints_tables_for_people(tmp_path: Path) -> None:
    done = _demo(tmp_path, "demo", "--jobs", "40", "--processes", "1")

    assert done.returncode == 0, done.stderr
    for title in ("jobs per state", "jobs per task", "latency of succeeded jobs", "jobs/s"):
        assert title in done.stdout
    assert (tmp_path / "ledgerq-demo.db").exists()
    assert (tmp_path / "ledgerq-demo.log").exists()


def test_bad_option_is_one_clear_error_without_traceback(tmp_path: Path) -> None:
    for option in (("--jobs", "0"), ("--processes", "0"), ("--concurrency", "-1")):
        done = _demo(tmp_path, "demo", *option, timeout=60)

        assert done.returncode == 2, option
        errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) == 1 and option[0] in errors[0], done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "ledgerq-demo.db").exists()


def test_missing_directory_is_refused(tmp_path: Path) -> None:
    done = _demo(tmp_path, "demo", "--database", str(tmp_path / "nope" / "d.db"), timeout=60)

    assert done.returncode == 2
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr


def test_a_file_that_is_not_sqlite_is_never_replaced(tmp_path: Path) -> None:
    precious = tmp_path / "notes.db"
    precious.write_text("not a database\n")

    done = _demo(tmp_path, "demo", "--jobs", "40", "--database", str(precious), timeout=60)

    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"error: refusing to replace {precious}: it is not an SQLite database"
    ]
    assert precious.read_text() == "not a database\n"


def test_ctrl_c_stops_the_workers_and_leaves_no_job_running(tmp_path: Path) -> None:
    database = tmp_path / "d.db"
    args = ("demo", "--jobs", "20000", "--processes", "2", "--database", str(database))
    demo = subprocess.Popen(
        [*CLI, "--json", *args],
        cwd=tmp_path,
        env=_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Hold SQLite's write lock from the end of the enqueue until Ctrl-C is sent, so no
        # worker can claim before it: the run cannot finish before the signal lands, however
        # late this process gets the CPU (the demo once finished all 20,000 jobs first).
        with _write_lock_after_enqueue(database, demo, 20000):
            _wait_for_workers(database, demo)
            demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.communicate()

    assert demo.returncode == 130, err
    assert "Traceback" not in err
    assert "interrupted:" in err and "SIGTERM" in err
    assert out == ""
    app = LedgerQ(database_url=f"sqlite:///{database}")
    try:
        states: dict[JobState, int] = {}
        for (_queue, state), n in app.client.store.count_jobs().items():
            states[state] = states.get(state, 0) + n
    finally:
        app.close()
    assert states.get(JobState.RUNNING, 0) == 0
    assert sum(states.values()) == 20000
    assert states.get(JobState.SUCCEEDED, 0) < 20000


@contextlib.contextmanager
def _write_lock_after_enqueue(
    database: Path, demo: subprocess.Popen[str], jobs: int
) -> Iterator[None]:
    """Wait (with a deadline) until the demo's ``jobs`` are committed, then hold the ledger's
    write lock (``BEGIN IMMEDIATE``) for the block."""
    deadline = time.monotonic() + 120
    while not database.exists():  # never create the demo's file ourselves
        assert demo.poll() is None, demo.communicate()
        assert time.monotonic() < deadline, "the demo did not create its ledger in 120 s"
        time.sleep(0.02)
    connection = sqlite3.connect(database, timeout=60, isolation_level=None)
    try:
        while True:
            assert demo.poll() is None, demo.communicate()
            assert time.monotonic() < deadline, "the demo did not enqueue its jobs in 120 s"
            try:
                count = connection.execute("SELECT count(*) FROM jobs").fetchone()[0]
            except sqlite3.OperationalError:
                count = 0  # no table yet
            if count >= jobs:
                break
            time.sleep(0.02)
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            connection.execute("ROLLBACK")
    finally:
        connection.close()


def _wait_for_workers(database: Path, demo: subprocess.Popen[str]) -> None:
    """Wait (with a deadline) until the workers started, so Ctrl-C lands mid-run."""
    log = database.with_suffix(".log")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert demo.poll() is None, demo.communicate()
        if log.exists() and "worker starting" in log.read_text():
            return
        time.sleep(0.05)
    raise AssertionError("the demo's workers did not start within 120 s")
