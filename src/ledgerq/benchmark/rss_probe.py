"""Resident memory of the workers of one bench target (ledgerq or a peer), measured through the
peers' own harness: ``python rss_probe.py MODULE memory|memory_drain``, run with the target's
interpreter in the peers' folder (stdlib and the harness only: the peers' venv has no ledgerq).

``memory``: the io mode's workers (ledgerq: 2 processes x 8 slots; dramatiq: 2 x 8 threads;
celery: 2 gevent processes x 8) run 40 no-op jobs, then stand idle (sampled: ``idle``), then
take ``BENCH_N_IO`` 10 ms jobs (sampled every 50 ms between 10% and 90% done, every slot busy:
``busy``). ``memory_drain``: ``BENCH_N`` no-op jobs are enqueued first, then drained by the
drain mode's workers, sampled when 10% and 100% are done (``growth``).

A worker process is a leaf of the process trees the harness started (a supervisor that only
forks workers, as dramatiq's, is counted in ``*_total_mb`` only). VmRSS counts pages shared
with a forking parent in full; Pss (``/proc/PID/smaps_rollup``) splits them. Prints one JSON
line, as the harness does.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: Warm-up jobs before the idle sample, as the harness's latency mode.
WARM_UP_JOBS = 40
#: Seconds the workers stand idle before their idle sample.
IDLE_SETTLE_SECONDS = 2.0
#: Between two samples while busy, in seconds.
SAMPLE_EVERY_SECONDS = 0.05
#: Longest wait for any phase, in seconds.
PHASE_TIMEOUT_SECONDS = float(os.environ.get("BENCH_MEMORY_TIMEOUT", "600"))


def _status_kb(pid: int, field: str, name: str = "status") -> int | None:
    try:
        text = Path(f"/proc/{pid}/{name}").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid (one pass over /proc)."""
    found: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold spaces
        found.setdefault(parent, []).append(int(entry.name))
    return found


def sample(leaders: list[int]) -> dict[str, Any]:
    """RSS and Pss (MB) of every process under ``leaders``; ``workers``: the leaves."""
    children = _children()
    every: list[int] = []
    stack = list(leaders)
    while stack:
        pid = stack.pop()
        every.append(pid)
        stack.extend(children.get(pid, []))
    rows = []
    for pid in every:
        rss = _status_kb(pid, "VmRSS")
        if rss is None:
            continue
        pss = _status_kb(pid, "Pss", "smaps_rollup")
        leaf = not children.get(pid)
        rows.append({"pid": pid, "leaf": leaf, "rss_mb": rss / 1024, "pss_mb": (pss or 0) / 1024})
    workers = [r for r in rows if r["leaf"]]
    return {
        "workers": len(workers),
        "rss_mb": statistics.median(r["rss_mb"] for r in workers) if workers else None,
        "pss_mb": statistics.median(r["pss_mb"] for r in workers) if workers else None,
        "total_rss_mb": sum(r["rss_mb"] for r in rows),
        "processes": len(rows),
    }


def _done(harness: Any) -> int:
    return int(harness._r.get(harness.K_DONE) or 0)


def _wait(harness: Any, count: int) -> None:
    deadline = time.monotonic() + PHASE_TIMEOUT_SECONDS
    while _done(harness) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {_done(harness)} of {count} jobs done in time")
        for proc in harness._procs:
            if proc.poll() is not None:
                raise RuntimeError(f"worker {proc.args} exited rc={proc.returncode}")
        time.sleep(0.005)


def _leaders(harness: Any) -> list[int]:
    return [proc.pid for proc in harness._procs]


def measure_memory(harness: Any, mod: Any) -> dict[str, Any]:
    """Idle after a warm-up, then busy on 10 ms jobs (see the module docstring)."""
    harness.start_workers(mod, "io", 0, f"{mod.NAME}.memory")
    mod.enqueue_single("noop", WARM_UP_JOBS)
    _wait(harness, WARM_UP_JOBS)
    time.sleep(IDLE_SETTLE_SECONDS)  # let the first jobs' garbage and threads settle
    idle = sample(_leaders(harness))
    harness.reset_counters()
    n = harness.N_IO
    # Sampled while the jobs are enqueued too: a peer without a bulk API (dramatiq) enqueues
    # one by one, and its workers keep pace with the producer.
    producer = threading.Thread(target=mod.prefill, args=("sleep", n), daemon=True)
    producer.start()
    busy: list[dict[str, Any]] = []
    deadline = time.monotonic() + PHASE_TIMEOUT_SECONDS
    while (done := _done(harness)) < n and time.monotonic() < deadline:
        if 0.1 * n <= done <= 0.9 * n:
            busy.append(sample(_leaders(harness)))
        time.sleep(SAMPLE_EVERY_SECONDS)
    producer.join(PHASE_TIMEOUT_SECONDS)
    if not busy:
        raise RuntimeError("no sample while the workers were busy (too few io jobs?)")
    peak = max(busy, key=lambda s: s["rss_mb"] or 0.0)
    return {
        "idle_rss_mb": idle["rss_mb"],
        "idle_pss_mb": idle["pss_mb"],
        "idle_total_mb": idle["total_rss_mb"],
        "busy_rss_mb": peak["rss_mb"],
        "busy_pss_mb": peak["pss_mb"],
        "busy_total_mb": peak["total_rss_mb"],
        "worker_processes": idle["workers"],
        "processes": idle["processes"],
        "busy_samples": len(busy),
    }


def measure_drain_growth(harness: Any, mod: Any) -> dict[str, Any]:
    """RSS at 10% and at 100% of a drain of ``BENCH_N`` no-op jobs."""
    n = harness.N_ENQ
    mod.prefill("noop", n)
    launched = time.time()
    harness.start_workers(mod, "drain", n, f"{mod.NAME}.memory_drain")
    _wait(harness, max(1, n // 10))
    at_10 = sample(_leaders(harness))
    _wait(harness, n)
    at_100 = sample(_leaders(harness))
    return {
        "n": n,
        "seconds": time.time() - launched,
        "rss_10pct_mb": at_10["rss_mb"],
        "rss_100pct_mb": at_100["rss_mb"],
        "growth_mb": (at_100["rss_mb"] or 0.0) - (at_10["rss_mb"] or 0.0),
        "pss_10pct_mb": at_10["pss_mb"],
        "pss_100pct_mb": at_100["pss_mb"],
        "total_10pct_mb": at_10["total_rss_mb"],
        "total_100pct_mb": at_100["total_rss_mb"],
        "worker_processes": at_100["workers"],
    }


def main() -> None:
    """``MODULE MODE``: print the result of MODE for the bench module MODULE as one JSON line."""
    sys.path[0] = os.getcwd()  # the peers' folder (the harness), not this script's folder
    module, mode = sys.argv[1], sys.argv[2]
    harness = importlib.import_module("harness")
    signal.signal(signal.SIGTERM, harness._on_term)  # a timed-out run stops its workers
    signal.signal(signal.SIGINT, harness._on_term)
    mod = importlib.import_module(module)
    started = time.time()
    measure = {"memory": measure_memory, "memory_drain": measure_drain_growth}[mode]
    try:
        mod.reset()
        harness.reset_counters()
        result = measure(harness, mod)
    except Exception as exc:  # reported in the result line, as the harness does
        result = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        harness._kill_all()
        mod.reset()
    result.update(peer=mod.NAME, mode=mode, wall_s=round(time.time() - started, 2))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
