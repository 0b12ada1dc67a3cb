"""``ledgerq schedule list|add|remove|pause|resume|runs`` and ``ledgerq scheduler``."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable
from types import FrameType

import click
from rich import box
from rich.markup import escape
from rich.table import Table

from ledgerq.app import schedule_ops
from ledgerq.app.schedule_ops import ScheduleOps
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.commands.jobs_cmd import parse_args_option
from ledgerq.core.schedules import Schedule, ScheduleRequest, ScheduleState
from ledgerq.metrics.exporter import HealthExporter
from ledgerq.metrics.prometheus import MetricsHub
from ledgerq.runtime.scheduler import Scheduler, SchedulerOptions

json_option = click.option("--json", "local_json", is_flag=True, help="Machine-readable output.")


@click.group("schedule")
def group() -> None:
    """Manage periodic schedules (code-declared ones appear once a scheduler has started)."""


def _table(states: list[ScheduleState], width: int) -> Table:
    """The schedules in ``width`` columns: every cell but the name gets the width its longest
    line needs (cells break only between their parts); the name takes what is left, folding
    only when a terminal is too narrow for it."""
    rows = [_cells(state) for state in states]
    headers = ("name", "cron", "task", "state", "policy", "next run")
    needed = [
        max([len(header)] + [len(line) for row in rows for line in row[i].split("\n")])
        for i, header in enumerate(headers)
    ]
    # Two blanks between cells (padding collapsed) and one at each edge.
    room = width - sum(needed[1:]) - 2 * len(headers)
    table = Table(
        title="schedules (times in UTC)",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    table.add_column(headers[0], overflow="fold", width=max(8, min(needed[0], room)))
    for header, need in zip(headers[1:], needed[1:], strict=True):
        table.add_column(header, width=need, overflow="fold")
    for row in rows:
        table.add_row(*(escape(cell) for cell in row))
    return table


def _cells(state: ScheduleState) -> tuple[str, ...]:
    s = state.schedule
    return (
        s.name,
        s.cron if s.tz == "UTC" else f"{s.cron}\n({s.tz})",
        f"{s.task}\n-> {s.queue}" if s.queue else s.task,
        "paused" if state.paused else "active",
        f"{s.missed.value}/{s.overlap.value}\n({s.source.value})",
        state.next_tick.strftime("%m-%d\n%H:%M:%S") if state.next_tick else "-",
    )


def _ops(cli: CliContext) -> ScheduleOps:
    app = cli.app()
    return schedule_ops.schedule_ops(cli.settings, app.parts, app.registry, app.schedules)


@group.command("list")
@json_option
@pass_cli
def list_schedules(cli: CliContext, local_json: bool) -> int:
    """Every schedule with its policies and next tick."""
    states = [overview.state for overview in _ops(cli).list_schedules()]
    if cli.as_json or local_json:
        cli.emit_json([s.as_dict() for s in states])
    else:
        cli.console.print(_table(states, cli.console.width))
    return 0


@group.command("add")
@click.argument("name")
@click.option("--cron", "cron_expression", required=True, help="5 fields, or 6 with seconds.")
@click.option("--task", required=True, help="Task name the schedule enqueues.")
@click.option("--args", "args_text", default="[]", help="JSON list or object of arguments.")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of the cron.")
@click.option("--queue", help="Queue (default: the task's, else 'default').")
@click.option("--missed", default="skip", show_default=True, help="skip | once | all.")
@click.option("--max-catchup", default=10, show_default=True, help="Most missed ticks 'all' runs.")
@click.option("--overlap", default="allow", show_default=True, help="skip | allow.")
@json_option
@pass_cli
def add(
    cli: CliContext,
    name: str,
    cron_expression: str,
    task: str,
    args_text: str,
    tz: str,
    queue: str | None,
    missed: str,
    max_catchup: int,
    overlap: str,
    local_json: bool,
) -> int:
    """Add schedule NAME that enqueues TASK at every tick of --cron."""
    args, kwargs = parse_args_option(args_text)
    request = ScheduleRequest(
        name,
        cron=cron_expression,
        task=task,
        args=tuple(args),
        kwargs=kwargs,
        tz=tz,
        queue=queue,
        missed=missed,
        max_catchup=max_catchup,
        overlap=overlap,
    )
    _ops(cli).add_schedule(request)
    _report(cli, local_json, name, "added")
    return 0


def _report(cli: CliContext, local_json: bool, name: str, action: str) -> None:
    if cli.as_json or local_json:
        cli.emit_json({"name": name, "action": action})
    else:
        click.echo(f"schedule {name} {action}")


def _change(action: str, apply: Callable[[ScheduleOps, str], object]) -> click.Command:
    """A command NAME that applies one change to a schedule and reports it."""

    @click.command(action)
    @click.argument("name")
    @json_option
    @pass_cli
    def command(cli: CliContext, name: str, local_json: bool) -> int:
        apply(_ops(cli), name)
        _report(cli, local_json, name, f"{action}d")  # removed, paused, resumed
        return 0

    return command


remove = _change("remove", ScheduleOps.remove_schedule)
remove.help = "Delete schedule NAME (its run history stays)."
pause = _change("pause", ScheduleOps.pause_schedule)
pause.help = "Stop schedule NAME from firing (kept across scheduler restarts)."
resume = _change("resume", ScheduleOps.resume_schedule)
resume.help = "Let schedule NAME fire again from now on (ticks of the pause never run)."
for _command in (remove, pause, resume):
    group.add_command(_command)


@group.command("runs")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 10000), default=20, show_default=True)
@json_option
@pass_cli
def runs(cli: CliContext, name: str, limit: int, local_json: bool) -> int:
    """The newest fired ticks of schedule NAME: job and the instance that fired it."""
    found = _ops(cli).list_runs(name, limit=limit)
    rows = [
        {"tick": r.tick.isoformat(), "job_id": r.job_id, "executed_by": r.executed_by}
        for r in found
    ]
    if cli.as_json or local_json:
        cli.emit_json(rows)
        return 0
    table = Table(title=f"runs of {name}")
    for column in ("tick", "job_id", "executed_by"):
        table.add_column(column)
    for row in rows:
        job = "skipped (overlap)" if row["job_id"] is None else str(row["job_id"])
        table.add_row(str(row["tick"]), job, str(row["executed_by"]))
    cli.console.print(table)
    return 0


@click.command("scheduler")
@click.option(
    "--poll-interval",
    type=click.FloatRange(0.05, 60),
    default=1.0,
    show_default=True,
    help="Longest sleep between passes, in seconds.",
)
@click.option(
    "--grace",
    type=click.FloatRange(0),
    default=60.0,
    show_default=True,
    help="Seconds a tick may be late and still fire; older ones follow the missed policy.",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    help="Serve /health/live and /metrics (scheduler_ticks_fired_total) on this port.",
)
@click.option("--health-host", default="127.0.0.1", show_default=True, help="Health bind address.")
@pass_cli
def scheduler_command(
    cli: CliContext, poll_interval: float, grace: float, health_port: int | None, health_host: str
) -> int:
    """Fire the ticks of every schedule until SIGTERM/SIGINT. Run as many as you like: each
    tick fires once. Code-declared schedules of --app are stored at start."""
    cli.log_as("scheduler")
    app = cli.app()
    hub = MetricsHub() if health_port is not None else None
    scheduler = app.scheduler(
        options=SchedulerOptions(poll_interval_seconds=poll_interval, grace_seconds=grace),
        on_fired=hub.sink.count_tick if hub is not None else None,
    )
    exporter = None
    if hub is not None and health_port is not None:
        exporter = HealthExporter(
            host=health_host, port=health_port, is_alive=lambda: True, render=hub.render
        )
        exporter.start()
    try:
        run_scheduler(scheduler, app.schedules.values())
    finally:
        if exporter is not None:
            exporter.stop()
    return 0


def run_scheduler(scheduler: Scheduler, declared: Iterable[Schedule]) -> None:
    """Store ``declared`` schedules, then run ``scheduler`` in the foreground until a signal."""

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        scheduler.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler.declare(list(declared))
    click.echo(f"scheduler {scheduler.instance_id} running", err=True)
    scheduler.run()
