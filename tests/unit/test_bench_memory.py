"""The bench's memory measurements: rss_probe.py reads the resident memory of the process
trees the harness started (the leaves are the worker processes), the runner runs it for the
memory modes, and the report shows the figures with ratios oriented like latency's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from ledgerq.benchmark import bench_runner, rss_probe
from ledgerq.benchmark.bench_cells import METRIC_BY_KEY
from ledgerq.benchmark.bench_report import Report
from ledgerq.benchmark.bench_tables import format_value
from tests.helpers import wait_until

# A supervisor that forks one worker holding ~40 MB, as dramatiq's main process does.
_TREE = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        ballast = bytearray(40 * 1024 * 1024)
        ballast[::4096] = b"x" * len(ballast[::4096])
        print("ready", flush=True)
        time.sleep(60)
        os._exit(0)
    time.sleep(60)
    """
)


def test_a_sample_counts_the_leaves_of_the_tree_as_the_worker_processes() -> None:
    tree = subprocess.Popen(
        [sys.executable, "-c", _TREE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert tree.stdout is not None and tree.stdout.readline().strip() == "ready"
        found = rss_probe.sample([tree.pid])
        assert found["processes"] == 2 and found["workers"] == 1
        assert found["rss_mb"] > 40  # the worker's ballast, not the supervisor
        assert found["total_rss_mb"] > found["rss_mb"]
        assert 0 < found["pss_mb"] <= found["rss_mb"]
    finally:
        os.killpg(tree.pid, signal.SIGKILL)  # the group this test started
        tree.wait(10)
        tree.stdout.close()
    wait_until(lambda: rss_probe.sample([tree.pid])["processes"] == 0, timeout=10)


def test_memory_modes_run_the_probe_with_the_targets_interpreter_and_module() -> None:
    ours = bench_runner.ledgerq_target("postgresql", "postgresql://x/db", Path("/p"))
    assert ours.command("io") == [*ours.argv, "io"]
    assert ours.command("memory") == [
        sys.executable,
        str(bench_runner.RSS_PROBE),
        "ledgerq.benchmark.bench_ledgerq",
        "memory",
    ]
    peer = bench_runner.peer_target("dramatiq", Path("/venv/bin/python"))
    assert peer.command("memory_drain") == [
        "/venv/bin/python",
        str(bench_runner.RSS_PROBE),
        "bench_dramatiq",
        "memory_drain",
    ]


def test_the_report_shows_memory_with_lower_is_better_ratios() -> None:
    rows = [
        {"target": "ledgerq_postgresql", "mode": "memory", "trial": 1, "idle_rss_mb": 50.0,
         "busy_rss_mb": 60.0},
        {"target": "dramatiq", "mode": "memory", "trial": 1, "idle_rss_mb": 40.0,
         "busy_rss_mb": 45.0},
    ]  # fmt: skip
    report = Report.from_rows(rows)
    assert report.summary["ledgerq_postgresql"]["rss_idle"].value == 50.0
    assert report.ratios_by_target["ledgerq_postgresql"]["dramatiq"]["rss_busy"] == 45.0 / 60.0
    assert {m["key"]: m["better"] for m in report.as_json()["metrics"]} == {
        "rss_idle": "lower",
        "rss_busy": "lower",
    }
    assert format_value(METRIC_BY_KEY["rss_idle"], 52.34) == "52.3"
