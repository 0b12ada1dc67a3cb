"""``ledgerq worker start``: run a worker process in the foreground until stopped, or with
``--processes N`` a manager that supervises N of them."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click
import structlog

from ledgerq.cli import managed_workers, worker_checks
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.lazy import LazyGroup, freezing_imports
from ledgerq.core import errors
from ledgerq.runtime.affinity import CpuClaim, claim_cpu
from ledgerq.runtime.manager import (
    EXIT_RECYCLE,
)
from ledgerq.runtime.worker import Worker

if TYPE_CHECKING:
    from ledgerq.app.application import LedgerQ
    from ledgerq.metrics.exporter import HealthExporter
    from ledgerq.metrics.prometheus import MetricsHub
    from ledgerq.runtime.scheduler import Scheduler


log = structlog.get_logger("ledgerq.worker")

_FLEET = "ledgerq.cli.commands.fleet_cmd:"
_CHECKS = "ledgerq.cli.commands.fleet_checks_cmd:"


@click.group(
    "worker",
    cls=LazyGroup,
    lazy_commands={
        "list": _FLEET + "list_workers",
        "stats": _FLEET + "stats",
        "health": _FLEET + "health",
        "stop": _FLEET + "stop",
        "stop-all": _FLEET + "stop_all",
        "deregister": _FLEET + "deregister",
        "cleanup-crashed": _FLEET + "cleanup_crashed",
        "failover-recovery": _FLEET + "failover_recovery",
        "failovers": _FLEET + "failovers",
        "validate-pool": _CHECKS + "validate_pool",
        "validate-config": _CHECKS + "validate_config",
        "export-config": _CHECKS + "export_config",
        "resource-stats": _CHECKS + "resource_stats",
    },
)
def group() -> None:
    """Run and manage workers."""


@group.command("start")
@click.option("--queues", "-q", help="Comma-separated queues (default: LEDGERQ_QUEUES).")
@click.option("--concurrency", "-c", type=click.IntRange(1, 1024), help="Jobs run at once.")
@click.option(
    "--prefetch",
    type=click.IntRange(0, 10000),
    help="Jobs claimed ahead of free slots (default: about 20 ms of work, 1-2x the concurrency).",
)
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
@click.option(
    "--burst",
    is_flag=True,
    help="Exit once nothing is queued and no job of the queues is due within 10 s (retries,"
    " postponed and --delay jobs due sooner are waited for; later and held ones are left).",
)
@click.option("--once", is_flag=True, help="Run exactly one job, then exit.")
@click.option("--grace", type=click.FloatRange(0), help="Seconds in-flight jobs get at shutdown.")
@click.option(
    "--poll-interval", type=click.FloatRange(0.001), help="Seconds between polls when idle."
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    help="Serve /health/live, /health/ready and /metrics on this port (127.0.0.1; see"
    " --health-host); with"
    " --processes N, child i serves on PORT+i.",
)
@click.option("--health-host", default="127.0.0.1", show_default=True, help="Health bind address.")
@click.option(
    "--processes", type=click.IntRange(1, 512), help="Supervise N worker processes (a manager)."
)
@click.option("--max-jobs", type=click.IntRange(1), help="Recycle a worker process after N jobs.")
@click.option(
    "--max-memory",
    type=click.FloatRange(1),
    help="Recycle a managed worker process above N MiB resident memory (with --processes).",
)
@click.option(
    "--start-method",
    type=click.Choice(["fork", "exec"]),
    help="How --processes starts each child: fork, a copy of the manager that has imported"
    " everything and so reaches its first job in milliseconds (the default on Linux), or"
    " exec, a fresh interpreter that imports it all again (the default elsewhere).",
)
@click.option("--managed", is_flag=True, hidden=True, help="Run as a manager's child.")
@click.option(
    "--scheduler",
    "with_scheduler",
    is_flag=True,
    help="Also fire the schedules' ticks (each tick fires once however many run it).",
)
@click.option(
    "--pin-cpu/--no-pin-cpu",
    default=None,
    help="Pin each worker process to a CPU no other worker on this host holds (Linux; default:"
    " LEDGERQ_PIN_CPU, off). Makes I/O-bound jobs cheaper; leave off for workers in separate"
    " containers sharing CPUs.",
)
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
    processes: int | None,
    max_jobs: int | None,
    max_memory: float | None,
    start_method: str | None,
    managed: bool,
    with_scheduler: bool,
    pin_cpu: bool | None,
) -> int:
    """Run jobs of the application's tasks until SIGTERM/SIGINT (a second one skips the grace
    period) or a stop request (``worker stop``). Unfinished jobs are put back to ``queued``.
    With ``--processes N`` a manager runs N workers and restarts crashed ones. At start it
    logs its version, database (password masked), driver, queues, concurrency and task count,
    and warns of each task or schedule whose queue neither it nor a live worker consumes."""
    from ledgerq.config.settings import Settings

    cli.log_as("worker" if processes is None else "manager")
    if processes is not None:
        if once:
            raise click.UsageError("--once runs one job in one process; drop --processes")
        fork = start_method == "fork" or (start_method is None and sys.platform == "linux")
        return managed_workers.manage(cli, processes, max_memory, health_port, fork=fork)
    if max_memory is not None or start_method is not None:
        needs = "--max-memory" if max_memory is not None else "--start-method"
        raise click.UsageError(f"{needs} needs --processes (the manager's option)")
    # A worker's start-up (the application, its connections, the driver's import) builds what
    # lives as long as the worker; collecting meanwhile only walks it (see _collector_paused).
    with _collector_paused() as collect_from_now_on:
        app = cli.app(tasks_needed=True)
        _refuse_a_ledger_without_tables(app)
        cpu_claim = _pin_to_a_cpu(app, pin_cpu)
        queue_names = Settings._split_queues(queues) if queues else None
        hub = None
        if health_port is not None:
            # Imported only here: a worker that serves no metrics starts without them.
            from ledgerq.metrics.prometheus import MetricsHub

            hub = MetricsHub()
            hub.watch_cpu()
            from ledgerq.app.operations_surface import pool_reading

            hub.watch_pool(pool_reading(app.parts))
        worker = app.worker(
            driver=driver,  # type: ignore[arg-type]  # click.Choice checked it
            strict=strict,
            events=hub.sink if hub is not None else None,
            queues=tuple(queue_names) if queue_names else None,
            concurrency=concurrency,
            prefetch=prefetch,
            burst=burst or None,
            max_jobs=1 if once else max_jobs,
            shutdown_grace_seconds=grace,
            poll_interval_seconds=poll_interval,
            recycle_when_hung=True,
        )
        options = worker.options
        worker_checks.announce_start(
            app, driver=driver, queues=options.queues, concurrency=options.concurrency
        )
        _install_signal_handlers(worker)
        say_exiting = managed_workers.watch_manager(worker) if managed else None
        exporter = None
        if hub is not None and health_port is not None:
            hub.watch_transport(worker.transport_fallback_active)
            exporter = _health_exporter(worker, hub, health_host, health_port)
            exporter.start()
        scheduler = start_scheduler(app, worker.id, hub) if with_scheduler else None
        cli.gather_routine_logs(True)  # a line per job start and end: slots must not wait on writes
        try:
            stats = worker.run(on_started=collect_from_now_on)
        finally:
            cli.gather_routine_logs(False)
            if say_exiting is not None:
                say_exiting()  # the manager no longer takes a silent shutdown for a hang
            _stop_beside(scheduler, exporter, cpu_claim)
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
        if worker.recycle_requested:
            return _recycle(stop_instead=managed or once or burst or max_jobs is not None)
        if managed and worker.budget_spent and not worker.stop_requested:
            return EXIT_RECYCLE  # its job budget is spent: the manager starts a fresh one
        return 0


@contextlib.contextmanager
def _collector_paused() -> Iterator[Callable[[], None]]:
    """Pause Python's cyclic garbage collector until the worker has started (the yielded
    function, called by ``Worker.run`` once its services run): the start-up allocates enough
    long-lived objects to trigger a full collection that finds no garbage (about 50 ms of a
    worker's start on a 2-core VM). Then ``gc.freeze()`` moves all of them out of the
    collector's view, so its passes while jobs run walk only what the jobs allocate. On the
    way out the collector runs again; where the CLI runs inside a longer-lived process (tests,
    embedding) it sees everything again, while the console script's process, about to exit,
    leaves it frozen rather than pay a full pass over it (40-50 ms) at its exit."""

    def collect_from_now_on() -> None:
        gc.freeze()
        gc.enable()

    gc.disable()
    try:
        yield collect_from_now_on
    finally:
        gc.enable()
        if not freezing_imports():
            gc.unfreeze()


def _recycle(*, stop_instead: bool) -> int:
    """End this process's image, so the thread of a timed-out job that is blocked in C dies
    before it can go on: a managed child (and a --once, --burst or --max-jobs worker) exits
    with ``EXIT_RECYCLE`` (the manager starts a fresh child); any other worker replaces
    itself with a fresh one of the same command line (``execv`` ends every thread at once)."""
    if stop_instead:
        return EXIT_RECYCLE
    command = [sys.executable, "-m", "ledgerq.cli.main", *sys.argv[1:]]
    log.warning("replacing this worker process with a fresh one", pid=os.getpid())
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
    return EXIT_RECYCLE  # not reached


def _stop_beside(
    scheduler: Scheduler | None, exporter: HealthExporter | None, cpu_claim: CpuClaim | None
) -> None:
    """Stop what ran beside the worker: its scheduler, its health exporter, its CPU claim."""
    if scheduler is not None:
        scheduler.stop()
    if exporter is not None:
        exporter.stop()
    if cpu_claim is not None:
        cpu_claim.release()


def _health_exporter(worker: Worker, hub: MetricsHub, host: str, port: int) -> HealthExporter:
    from ledgerq.metrics.exporter import HealthExporter

    # The health check metrics count the registrar's checks (``HealthChecked`` events), not
    # these probes: a stalled worker still answers /health/live.
    return HealthExporter(
        host=host,
        port=port,
        is_alive=lambda: not worker.stop_requested,
        is_ready=worker.readiness,
        render=hub.render,
    )


def _refuse_a_ledger_without_tables(app: LedgerQ) -> None:
    """A ledger without tables is a set-up mistake: say so and stop (``StoreError``) rather
    than retry forever. A database that is down is an outage: the worker waits for it."""
    with contextlib.suppress(errors.StoreUnavailable):
        app.parts.store.check_tables()


def _pin_to_a_cpu(app: LedgerQ, pin_cpu: bool | None) -> CpuClaim | None:
    """With ``--pin-cpu`` (or ``LEDGERQ_PIN_CPU``), pin this worker process to a free CPU (see
    ``runtime/affinity.py``) and say which."""
    if not (app.settings.pin_cpu if pin_cpu is None else pin_cpu):
        return None
    claim = claim_cpu()
    if claim is None:
        log.warning("could not pin to a CPU: none free for this worker, or no CPU affinity here")
    else:
        log.info("pinned to a CPU", cpu=claim.cpu)
    return claim


def _install_signal_handlers(worker: Worker) -> None:
    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # The first signal asks for a graceful stop, the second skips the grace period.
        worker.request_stop(immediate=worker.stop_requested)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def start_scheduler(app: LedgerQ, worker_id: str, hub: MetricsHub | None) -> Scheduler:
    """For ``worker start --scheduler``: store the application's schedules and fire ticks on a
    background thread, recording the worker's id as ``executed_by`` (and counting ticks in
    ``hub`` if the worker serves metrics). Stop it with ``stop``."""
    on_fired = hub.sink.count_tick if hub is not None else None
    scheduler = app.scheduler(instance_id=worker_id, on_fired=on_fired)
    scheduler.declare(list(app.schedules.values()))
    scheduler.start()
    return scheduler
