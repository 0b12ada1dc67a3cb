"""``ledgerq worker start``: run a worker process in the foreground until stopped."""

from __future__ import annotations

import signal
from types import FrameType

import click

from ledgerq.cli.context import CliContext, pass_cli
from ledgerq.metrics.exporter import HealthExporter
from ledgerq.metrics.prometheus import MetricsHub
from ledgerq.runtime.worker import Worker


@click.group("worker")
def group() -> None:
    """Run and manage workers."""


@group.command("start")
@click.option("--queues", "-q", help="Comma-separated queues (default: LEDGERQ_QUEUES).")
@click.option("--concurrency", "-c", type=click.IntRange(1, 1024), help="Jobs run at once.")
@click.option("--prefetch", type=click.IntRange(0, 10000), help="Jobs claimed ahead of free slots.")
@click.option(
    "--driver",
    type=click.Choice(["auto", "redis", "dbpoll"]),
    default="auto",
    show_default=True,
    help="Transport: redis takes job ids from Redis; dbpoll polls the database (LISTEN/NOTIFY"
    " on PostgreSQL); auto is redis with fallback to polling when LEDGERQ_REDIS_URL is set,"
    " else dbpoll.",
)
@click.option(
    "--strict", is_flag=True, help="Refuse to start if Redis may evict keys (not noeviction)."
)
@click.option("--burst", is_flag=True, help="Exit once the queues are empty.")
@click.option("--once", is_flag=True, help="Run exactly one job, then exit.")
@click.option("--grace", type=click.FloatRange(0), help="Seconds in-flight jobs get at shutdown.")
@click.option(
    "--poll-interval", type=click.FloatRange(0.001), help="Seconds between polls when idle."
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    help="Serve /health/live and /metrics on this port (127.0.0.1; see --health-host).",
)
@click.option("--health-host", default="127.0.0.1", show_default=True, help="Health bind address.")
@pass_cli
def start(
    cli: CliContext,
    queues: str | None,
    concurrency: int | None,
    prefetch: int | None,
    driver: str,
    strict: bool,
    burst: bool,
    once: bool,
    grace: float | None,
    poll_interval: float | None,
    health_port: int | None,
    health_host: str,
) -> int:
    """Run jobs of the application's tasks until SIGTERM/SIGINT (a second one skips the grace
    period). Unfinished jobs are put back to ``queued``."""
    from ledgerq.config import Settings

    app = cli.app(tasks_needed=True)
    queue_names = Settings._split_queues(queues) if queues else None
    hub = MetricsHub() if health_port is not None else None
    if hub is not None:
        hub.watch_cpu()
    worker = app.worker(
        driver=driver,  # type: ignore[arg-type]  # click.Choice checked it
        strict=strict,
        events=hub.sink if hub is not None else None,
        queues=tuple(queue_names) if queue_names else None,
        concurrency=concurrency,
        prefetch=prefetch,
        burst=burst or None,
        max_jobs=1 if once else None,
        shutdown_grace_seconds=grace,
        poll_interval_seconds=poll_interval,
    )
    _install_signal_handlers(worker)
    exporter = None
    if hub is not None and health_port is not None:
        hub.watch_transport(worker.transport_fallback_active)
        exporter = _health_exporter(worker, hub, health_host, health_port)
        exporter.start()
    try:
        stats = worker.run()
    finally:
        if exporter is not None:
            exporter.stop()
    if cli.as_json:
        cli.emit_json(
            {
                "worker_id": worker.id,
                "outcomes": dict(stats.outcomes),
                "refused": stats.refused,
                "requeued": stats.requeued,
                "dropped_hints": stats.dropped_hints,
            }
        )
    return 0


def _health_exporter(worker: Worker, hub: MetricsHub, host: str, port: int) -> HealthExporter:
    def is_alive() -> bool:
        alive = not worker.stop_requested
        hub.sink.record_health_check(alive)
        return alive

    return HealthExporter(host=host, port=port, is_alive=is_alive, render=hub.render)


def _install_signal_handlers(worker: Worker) -> None:
    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # The first signal asks for a graceful stop, the second skips the grace period.
        worker.request_stop(immediate=worker.stop_requested)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
