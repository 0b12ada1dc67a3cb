"""``ledgerq bench``: ledgerq (PostgreSQL, SQLite, MariaDB) and the peer queues on the same
workloads through the peers' own harness, as one table of figures and ratios plus the targets."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from ledgerq.benchmark import BenchError, bench_runner, bench_tables, peers
from ledgerq.benchmark.bench_report import Report
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.commands.bench_setup import (
    context_of,
    ledgerq_targets,
    new_runner,
    parse_backends,
    parse_modes,
    parse_peers,
    run_with_progress,
)


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
        from ledgerq.cli.commands import bench_sweep  # only a sweep needs it

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
    bench = new_runner(options, peers_dir, f"results-{stamp}.jsonl")
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
