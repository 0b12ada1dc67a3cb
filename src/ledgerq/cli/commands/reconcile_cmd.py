"""``ledgerq reconcile``: repair the ledger and re-announce jobs, once or every interval."""

from __future__ import annotations

import signal
import threading
from types import FrameType

import click

from ledgerq.app import wiring
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.runtime.reconciler import ReconcileReport


@click.command("reconcile")
@click.option("--once", is_flag=True, help="One pass, then exit (repairs only; runs no job).")
@click.option(
    "--interval", type=click.FloatRange(0.01), help="Seconds between passes (RECONCILE_INTERVAL)."
)
@pass_cli
def command(cli: CliContext, once: bool, interval: float | None) -> int:
    """Put back stuck running jobs, stage due jobs, re-send queued job ids to Redis, and delete
    jobs past their retention. Workers run this too (one instance at a time); this command
    is for a dedicated process or a cron job."""
    cli.log_as("reconciler")
    app = cli.app()
    settings = app.settings
    transport = wiring.producer_transport(settings, app.parts)
    reconciler = wiring.build_reconciler(settings, app.parts, transport)
    try:
        if once:
            _show(cli, reconciler.run_once())
            return 0
        stop = threading.Event()

        def on_signal(_signum: int, _frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        every = interval or settings.reconcile_interval
        while not stop.is_set():
            _show(cli, reconciler.run_once())
            stop.wait(every)
        return 0
    finally:
        transport.close()


def _show(cli: CliContext, report: ReconcileReport) -> None:
    if cli.as_json:
        cli.emit_json(report.as_dict())
        return
    if not report.ran:
        cli.console.print("another instance is reconciling; skipped this pass")
        return
    counts = ", ".join(
        f"{k.replace('_', ' ')}: {v}" for k, v in report.as_dict().items() if k != "ran"
    )
    cli.console.print(f"reconciled ({counts})")
