"""Entry point of ``ledgerq``: global options, command registration and error handling.

A user mistake (bad input, unreachable database, unknown task) prints one line to stderr and
exits non-zero; tracebacks are for bugs only.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import TextIO, cast

import click
import structlog

from ledgerq.cli import logs
from ledgerq.cli.cli_context import CliContext
from ledgerq.cli.lazy import LazyGroup, freeze_command_imports
from ledgerq.cli.log_output import LogOutput
from ledgerq.cli.text_log import TextRenderer
from ledgerq.core import errors
from ledgerq.runtime.log_context import merge_job_context


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of writing, so a log line never hits
    a stream that was swapped out and closed (test capture, embedding)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str, fmt: str, component: str = "cli") -> logs.LogSetup:
    """Route structlog to stderr as text or JSON lines, each with a ``component`` (see
    ``logs.ComponentTagger``); JSON lines have an upper-case ``level`` and also carry the
    text as ``message``."""
    json_lines = fmt == "json"
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_lines else TextRenderer()
    )
    tagger = logs.ComponentTagger(component)
    output = LogOutput(cast(TextIO, _CurrentStderr()))
    shape: list[structlog.types.Processor] = [tagger]
    if json_lines:  # a terminal's text lines keep structlog's own level column
        shape += [logs.upper_case_level, logs.add_message]
    structlog.configure(
        processors=[
            merge_job_context,  # job_id, queue, task, attempt of the running job
            structlog.contextvars.merge_contextvars,
            logs.redact_secrets,
            structlog.processors.add_log_level,
            *shape,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=logs.NamedPrintLoggerFactory(output),
        cache_logger_on_first_use=False,
    )
    return logs.LogSetup(tagger, output)


_COMMANDS = "ledgerq.cli.commands."
#: Every top-level command, imported only when it runs (or ``--help`` lists them).
TOP_LEVEL_COMMANDS = {
    "batch": _COMMANDS + "batches_cmd:group",
    "bench": _COMMANDS + "bench_cmd:command",
    "config": _COMMANDS + "config_cmd:group",
    "db": _COMMANDS + "db_cmd:group",
    "demo": _COMMANDS + "demo_cmd:command",
    "job": _COMMANDS + "jobs_cmd:group",
    "queue": _COMMANDS + "queue_cmd:group",
    "reconcile": _COMMANDS + "reconcile_cmd:command",
    "schedule": _COMMANDS + "schedule_cmd:group",
    "scheduler": _COMMANDS + "schedule_cmd:scheduler_command",
    "serve": _COMMANDS + "serve_cmd:command",
    "spool": _COMMANDS + "spool_cmd:group",
    "worker": _COMMANDS + "worker_cmd:group",
    "workflow": _COMMANDS + "workflow_cmd:group",
}
#: Each top-level command's short help, for ``ledgerq --help`` without importing them all
#: (``tests/unit/test_cli_lazy.py`` checks each against its command's docstring).
TOP_LEVEL_HELP = {
    "batch": "Inspect batches of jobs and retry their failures.",
    "bench": "Measure ledgerq and the peer queues on the same workloads; print figures,"
    " ledgerq's ratio to each peer and whether the issue's targets are met.",
    "config": "Inspect settings.",
    "db": "Create, upgrade and inspect the ledger's tables.",
    "demo": "Run a realistic mixed workload on a fresh SQLite ledger with a pool of worker"
    " processes, show progress live, and summarise states, retries, throughput and latency.",
    "job": "Enqueue and inspect jobs.",
    "queue": "Inspect, pause and resume queues.",
    "reconcile": "Put back stuck running jobs, stage due jobs, re-send queued job ids to Redis,"
    " and delete jobs past their retention.",
    "schedule": "Manage periodic schedules (code-declared ones appear once a scheduler has"
    " started).",
    "scheduler": "Fire the ticks of every schedule until SIGTERM/SIGINT.",
    "serve": "Serve the HTTP API and dashboard.",
    "spool": "Inspect and replay the enqueue spool (LEDGERQ_SPOOL).",
    "worker": "Run and manage workers.",
    "workflow": "Inspect, cancel and retry workflows.",
}


@click.group(
    cls=LazyGroup,
    lazy_commands=TOP_LEVEL_COMMANDS,
    lazy_help=TOP_LEVEL_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("--app", "app_ref", envvar="LEDGERQ_APP", help="Application as module:attribute.")
@click.option("--database-url", help="Override LEDGERQ_DATABASE_URL.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("-v", "--verbose", is_flag=True, help="Log at DEBUG level.")
@click.version_option(package_name="ledgerq")
@click.pass_context
def cli(
    ctx: click.Context, app_ref: str | None, database_url: str | None, as_json: bool, verbose: bool
) -> None:
    """ledgerq: a job queue whose SQL database is the truth."""
    # pydantic-settings only once a command runs: ``ledgerq --help`` does without it.
    from ledgerq.config.settings import load_settings

    settings = load_settings(
        app=app_ref, database_url=database_url, log_level="DEBUG" if verbose else None
    )
    log_setup = configure_logging(settings.log_level, settings.log_format)
    ctx.obj = CliContext(settings=settings, as_json=as_json, log_setup=log_setup)
    if database_url is not None:
        ctx.obj.overrides["database_url"] = database_url
    ctx.call_on_close(ctx.obj.close)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (0 ok, 1 error, 2 usage)."""
    return exit_code_of(
        lambda: cli.main(
            args=list(argv) if argv is not None else None,
            prog_name="ledgerq",
            standalone_mode=False,
        )
    )


def exit_code_of(run: Callable[[], object]) -> int:
    """Call ``run`` (a command) and return its exit code, showing a user's mistake or a
    ledgerq error as one line on stderr, never a traceback."""
    try:
        code = run()
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except errors.LedgerqError as exc:
        click.echo(f"error: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        return 130
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    # ``python -m ledgerq.cli.main`` (a manager's exec'd children, a worker replacing itself)
    # owns its process as the console script does (``ledgerq.cli.entry``).
    freeze_command_imports()
    sys.exit(main())
