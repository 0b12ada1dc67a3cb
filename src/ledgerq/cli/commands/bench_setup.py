"""What ``ledgerq bench`` and its process-count sweep (``bench_sweep.py``) share: parsing
``--only`` and ``--backends``, preparing the ledgerq targets, the progress bar and the run's
context."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ledgerq.benchmark import BenchError, bench_runner, peers
from ledgerq.benchmark.bench_cells import display_name

_MODE_ALIASES = {
    "single": "enqueue_single",
    "bulk": "enqueue_bulk",
    "enqueue": "enqueue_single,enqueue_bulk",
}
_BACKEND_ALIASES = {
    "postgres": "postgresql",
    "pg": "postgresql",
    "mariadb": "mysql",
    "redis": "postgresql-redis",
    "pgredis": "postgresql-redis",
    "redis-down": "postgresql-redis-down",
    "outage": "postgresql-redis-down",
    "pgbouncer": "postgresql-pgbouncer",
}


def _split(value: str) -> list[str]:
    return [part.strip().lower() for part in value.split(",") if part.strip()]


def parse_modes(value: str | None) -> list[str]:
    """``--only`` as harness modes, in run order; raise ``BenchError`` for an unknown one."""
    if not value:
        return list(bench_runner.MODES)
    wanted = {m for part in _split(value) for m in _MODE_ALIASES.get(part, part).split(",")}
    every = (*bench_runner.MODES, *bench_runner.OPTIONAL_MODES)
    unknown = sorted(wanted - set(every))
    if unknown:
        raise BenchError(
            f"unknown measurement(s) {', '.join(unknown)}: choose from {', '.join(every)}"
        )
    return [m for m in every if m in wanted]


def parse_backends(value: str) -> list[str]:
    """``--backends`` as postgresql/sqlite/mysql; raise ``BenchError`` for an unknown one."""
    found = [_BACKEND_ALIASES.get(b, b) for b in _split(value)]
    unknown = sorted(set(found) - set(bench_runner.DEFAULT_URLS))
    if unknown or not found:
        raise BenchError(
            f"unknown backend(s) {', '.join(unknown) or '(none)'}:"
            " choose from postgresql, sqlite, mysql, postgresql-redis, postgresql-redis-down,"
            " postgresql-pgbouncer"
        )
    return list(dict.fromkeys(found))


def parse_peers(value: str | None, no_peers: bool, known: list[str]) -> list[str]:
    """``--peers`` (default: the seven of RESULTS.md) checked against the peers' folder."""
    if no_peers:
        return []
    chosen = _split(value) if value else list(peers.DEFAULT_PEERS)
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise BenchError(f"unknown peer(s) {', '.join(unknown)}: choose from {', '.join(known)}")
    return list(dict.fromkeys(chosen))


def ledgerq_targets(
    bench: bench_runner.Runner, backends: list[str], options: dict[str, Any], note: Console
) -> list[bench_runner.Target]:
    """The ledgerq targets of ``backends`` whose setup (create database, migrate) worked."""
    urls = {
        **bench_runner.DEFAULT_URLS,
        "postgresql": options["postgres_url"],
        "postgresql-redis": options["postgres_url"],
        "postgresql-redis-down": options["postgres_url"],
        "mysql": options["mysql_url"],
        "postgresql-pgbouncer": options["pgbouncer_url"],
    }
    ready = []
    for backend in backends:
        direct = options["postgres_url"] if backend == "postgresql-pgbouncer" else None
        target = bench_runner.ledgerq_target(backend, urls[backend], bench.peers_dir, direct)
        with note.status(f"preparing {display_name(target.key)} (create database, migrate)"):
            result = bench.setup(target)
        if "error" in result:
            first = " ".join(str(result["error"]).split())[:200]
            note.print(f"{display_name(target.key)}: skipped, its setup failed: {first}")
            continue
        ready.append(target)
        if options.get("pinned"):
            # Same ledger, so its setup is done: only the workers' affinity differs.
            pinned = bench_runner.ledgerq_target(
                backend, urls[backend], bench.peers_dir, direct, pinned=True
            )
            ready.append(pinned)
    return ready


def run_with_progress(
    bench: bench_runner.Runner,
    targets: list[bench_runner.Target],
    modes: list[str],
    trials: int,
    note: Console,
) -> list[dict[str, Any]]:
    """``bench.run_all`` under a rich progress bar on ``note``; the result rows."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=note, transient=False) as progress:
        bar = progress.add_task("starting", total=len(targets) * len(modes) * trials)
        started = False

        def on_start(description: str) -> None:
            nonlocal started
            if started:
                progress.advance(bar)
            started = True
            progress.update(bar, description=description)

        rows = bench.run_all(targets, modes, trials, on_start)
        progress.update(bar, advance=1, description="done")
    return rows


def context_of(
    options: dict[str, Any],
    stamp: str,
    load: tuple[float, float, float],
    bench: bench_runner.Runner,
    targets: list[bench_runner.Target],
) -> dict[str, Any]:
    """The run's context for the JSON and the summary: command, sizes, machine, files."""
    return {
        "command": " ".join(["ledgerq", *sys.argv[1:]]) if sys.argv else "ledgerq bench",
        "started_at": stamp,
        "trials": options["trials"],
        "sizes": bench.sizes.env(),
        "targets_run": [t.key for t in targets],
        "results_file": str(bench.results_path),
        "summary_file": str(bench.results_path.with_name(f"summary-{stamp}.md")),
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in load],
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
    }


def new_runner(
    options: dict[str, Any],
    peers_dir: Path,
    results_name: str,
    watch: bench_runner.Watch | None = None,
) -> bench_runner.Runner:
    """A runner of the command's sizes and timeout, writing ``results_name`` in
    ``--results-dir``."""
    return bench_runner.Runner(
        peers_dir=peers_dir,
        sizes=bench_runner.Sizes(
            options["n"], options["n_io"], options["lat_rate"], options["lat_secs"]
        ),
        results_path=options["results_dir"] / results_name,
        timeout_seconds=options["timeout_s"],
        watch=watch,
    )
