"""``ledgerq bench``: ledgerq (PostgreSQL, SQLite, MariaDB) and the peer queues on the same
workloads through the peers' own harness, as one table of figures and ratios plus the targets."""

from __future__ import annotations

import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ledgerq.benchmark import BenchError, bench_runner, bench_tables, peers
from ledgerq.benchmark.bench_cells import display_name
from ledgerq.benchmark.bench_report import Report
from ledgerq.cli.cli_context import CliContext, pass_cli

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


@click.command("bench")
@click.option(
    "--peers", "peer_names", metavar="LIST", help="Comma-separated peers (default: all seven)."
)
@click.option("--no-peers", is_flag=True, help="Measure ledgerq only.")
@click.option(
    "--only",
    metavar="LIST",
    help="Measurements: enqueue_single,enqueue_bulk,drain,io,latency,memory; memory_drain"
    " (worker RSS at 10% and 100% of a drain of --n jobs) only when named.",
)
@click.option(
    "--backends",
    default="postgresql,postgresql-redis,postgresql-redis-down,sqlite,mysql",
    show_default=True,
    help="ledgerq's ledgers (postgresql-redis: PostgreSQL with the Redis transport;"
    " postgresql-redis-down: the same with Redis unreachable, for the outage target;"
    " postgresql-pgbouncer: the PostgreSQL ledger through --pgbouncer-url).",
)
@click.option(
    "--pinned",
    is_flag=True,
    help="Also run each ledgerq backend with its workers pinned to a CPU each (--pin-cpu),"
    " shown beside as ledgerq/<backend>_pinned; the targets are judged unpinned, as a user's"
    " workers start by default.",
)
@click.option(
    "--procs",
    metavar="LIST",
    help="Sweep the worker process count, e.g. 1,2,4,8,16: drain and io of the ledgerq"
    " backends at each count, with the database's, workers' and Redis's CPU (no peers;"
    " default: no sweep, 2 processes).",
)
@click.option(
    "--trials", type=click.IntRange(1, 20), default=1, show_default=True, help="Median of K trials."
)
@click.option(
    "--n",
    type=click.IntRange(10),
    default=20_000,
    show_default=True,
    help="Jobs to enqueue and drain.",
)
@click.option(
    "--n-io",
    type=click.IntRange(16),
    default=2_000,
    show_default=True,
    help="10 ms jobs of the io run.",
)
@click.option(
    "--lat-rate",
    type=click.FloatRange(1, 5000),
    default=200.0,
    show_default=True,
    help="Jobs/s of the latency run.",
)
@click.option(
    "--lat-secs",
    type=click.FloatRange(1, 600),
    default=10.0,
    show_default=True,
    help="Seconds of the latency run.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(10),
    default=bench_runner.RUN_TIMEOUT_SECONDS,
    show_default=True,
    help="Seconds one run may take.",
)
@click.option(
    "--postgres-url",
    envvar="LEDGERQ_BENCH_POSTGRES_URL",
    default=bench_runner.DEFAULT_URLS["postgresql"],
    show_default=True,
)
@click.option(
    "--pgbouncer-url",
    envvar="LEDGERQ_BENCH_PGBOUNCER_URL",
    default=bench_runner.DEFAULT_URLS["postgresql-pgbouncer"],
    show_default=True,
    help="A PgBouncer (transaction pooling) in front of --postgres-url's database.",
)
@click.option(
    "--mysql-url",
    envvar="LEDGERQ_BENCH_MYSQL_URL",
    default=bench_runner.DEFAULT_URLS["mysql"],
    show_default=True,
)
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path),
    default=Path("bench-results"),
    show_default=True,
)
@click.option(
    "--scratch",
    type=click.Path(path_type=Path),
    help="Scratch folder (default: ~/.cache/ledgerq-bench).",
)
@click.option(
    "--peers-source",
    type=click.Path(path_type=Path),
    help="The peers' folder (default: ../shared/bench/peers).",
)
@pass_cli
def command(cli: CliContext, /, **options: Any) -> int:
    """Measure ledgerq and the peer queues on the same workloads; print figures, ledgerq's
    ratio to each peer and whether the issue's targets are met. Speed only, never a test."""
    if options["procs"] is not None:
        from ledgerq.cli.commands import bench_sweep  # imports this module: import it late

        return bench_sweep.run(cli, options)
    modes = parse_modes(options["only"])
    backends = parse_backends(options["backends"])
    bench_runner.check_extra()
    bench_runner.check_redis()
    with bench_runner.exclusive():
        report = _measure(options, modes, backends)
    if cli.as_json:
        cli.emit_json(report.as_json())
        return 0
    # Piped to a file, rich would wrap the wide table at 80 columns.
    out = cli.console if cli.console.is_terminal else Console(width=220, highlight=False)
    out.print(bench_tables.results_table(report))
    for problem in report.problems:
        out.print(f"failed: {problem}", markup=False)
    out.print(bench_tables.targets_table(report))
    ctx = report.context
    out.print(f"raw results: {ctx['results_file']}  summary: {ctx['summary_file']}", markup=False)
    return 0


def _measure(options: dict[str, Any], modes: list[str], backends: list[str]) -> Report:
    """Prepare the peers and ledgers, run every measurement, and save the summary."""
    note = Console(stderr=True, highlight=False, soft_wrap=True)
    scratch = options["scratch"] or peers.default_scratch()
    peers_dir = peers.sync(peers.find_source(options["peers_source"]), scratch)
    chosen = parse_peers(options["peer_names"], options["no_peers"], peers.available(peers_dir))
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    bench = bench_runner.Runner(
        peers_dir=peers_dir,
        sizes=bench_runner.Sizes(
            options["n"], options["n_io"], options["lat_rate"], options["lat_secs"]
        ),
        results_path=options["results_dir"] / f"results-{stamp}.jsonl",
        timeout_seconds=options["timeout_s"],
    )
    targets = ledgerq_targets(bench, backends, options, note)
    targets += _peer_targets(peers_dir, chosen, note)
    if not targets:
        raise BenchError("nothing left to measure: every backend failed its setup")
    load = os.getloadavg()
    rows = run_with_progress(bench, targets, modes, options["trials"], note)
    context = context_of(options, stamp, load, bench, targets)
    report = Report.from_rows(rows, context, lat_rate=options["lat_rate"])
    summary_path = Path(report.context["summary_file"])
    summary_path.write_text(_summary_markdown(report))
    return report


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


def _peer_targets(peers_dir: Path, chosen: list[str], note: Console) -> list[bench_runner.Target]:
    if not chosen:
        return []
    with note.status("setting up the peers (setup.sh; the first run installs their venv)"):
        reason = peers.set_up(peers_dir)
    if reason is not None:
        note.print(f"peers unavailable, measuring ledgerq only: {reason}")
        return []
    python = peers.venv_python(peers_dir)
    return [bench_runner.peer_target(name, python) for name in chosen]


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


def _summary_markdown(report: Report) -> str:
    ctx = report.context
    head = [
        f"# ledgerq bench {ctx['started_at']} UTC",
        "",
        f"Command: `{ctx['command']}`  ",
        f"Sizes: {ctx['sizes']}  ",
        f"Machine: {ctx['machine']}  ",
        f"Raw results: `{ctx['results_file']}`",
        "",
    ]
    return "\n".join(head) + "\n" + bench_tables.markdown(report)
