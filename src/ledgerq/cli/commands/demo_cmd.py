"""``ledgerq demo``: parse options, run the demo, print its summary (tables or ``--json``)."""

from __future__ import annotations

from pathlib import Path

import click

from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.demo import workload

_EXIT_CODES = {"finished": 0, "stalled": 1, "interrupted": 130}


@click.command("demo")
@click.option(
    "--jobs",
    type=click.IntRange(workload.MIN_JOBS, 1_000_000),
    default=20_000,
    show_default=True,
    help="Jobs in the workload.",
)
@click.option(
    "--processes",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Worker processes.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 256),
    default=8,
    show_default=True,
    help="Jobs each worker process runs at once.",
)
@click.option(
    "--database",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("ledgerq-demo.db"),
    show_default=True,
    help="SQLite file of the demo; deleted and re-created. Workers log next to it.",
)
@pass_cli
def command(cli: CliContext, jobs: int, processes: int, concurrency: int, database: Path) -> int:
    """Run a realistic mixed workload on a fresh SQLite ledger with a pool of worker
    processes, show progress live, and summarise states, retries, throughput and latency."""
    if not database.parent.resolve().is_dir():
        raise click.BadParameter(
            f"directory {database.parent} does not exist", param_hint="--database"
        )
    # Imported here: the demo's task module builds its LedgerQ at import time, and a bad
    # LEDGERQ_* setting must not break every other command.
    from ledgerq.demo import demo_report, demo_runner

    options = demo_runner.DemoOptions(jobs, processes, concurrency, database)
    run = demo_runner.run_demo(options, cli.console, show_live=not cli.as_json)
    if run.outcome == "interrupted":
        click.echo(run.detail, err=True)
        return _EXIT_CODES[run.outcome]
    if cli.as_json:
        cli.emit_json(run.summary)
    else:
        demo_report.render(run.summary, cli.console)
    if run.outcome != "finished":
        click.echo(f"error: {run.detail}", err=True)
    return _EXIT_CODES[run.outcome]
