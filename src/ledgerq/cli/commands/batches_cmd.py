"""``ledgerq batch show|retry-failed``."""

from __future__ import annotations

import click

from ledgerq.cli import batch_output
from ledgerq.cli.cli_context import CliContext, pass_cli


@click.group("batch")
def group() -> None:
    """Inspect batches of jobs and retry their failures."""


@group.command("show")
@click.argument("batch_id", type=click.IntRange(min=1))
@pass_cli
def show(cli: CliContext, batch_id: int) -> int:
    """Show a batch's progress, members per state and callbacks."""
    status = cli.app().batches.get(batch_id)
    if cli.as_json:
        cli.emit_json(status.as_dict())
    else:
        cli.console.print(batch_output.batch_view(status))
    return 0


@group.command("retry-failed")
@click.argument("batch_id", type=click.IntRange(min=1))
@pass_cli
def retry_failed(cli: CliContext, batch_id: int) -> int:
    """Queue the batch's dead and failed members again (only those)."""
    job_ids = cli.app().batches.retry_failed(batch_id)
    if cli.as_json:
        cli.emit_json({"batch_id": batch_id, "retried": job_ids})
    else:
        cli.console.print(f"batch {batch_id}: retried {len(job_ids)} job(s)")
    return 0
