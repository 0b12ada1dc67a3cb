"""``worker start --processes N``: the manager's side (the children's command line, and failing
a crashed child over at once) and the child's side (pulsing to its manager, stopping when it is
gone, saying when it exits). See ``runtime/manager.py``."""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

import click
import structlog

from ledgerq.cli.cli_context import CliContext
from ledgerq.core import errors
from ledgerq.runtime.manager import (
    EXITING,
    PULSE_FD_ENV,
    PULSE_INTERVAL_SECONDS,
    Manager,
    ManagerOptions,
)

if TYPE_CHECKING:
    from ledgerq.app.application import LedgerQ
    from ledgerq.runtime.worker import Worker

log = structlog.get_logger("ledgerq.worker")


def _child_health_port(health_port: int | None, slot: int) -> int | None:
    """Child ``slot``'s health port: ``P + slot`` for ``--health-port P``, a free one for 0."""
    if health_port is None:
        return None
    return health_port + slot if health_port else 0


def _child_command(slot: int, health_port: int | None) -> list[str]:
    """This process's command line, as a manager's child: the same options (and the same
    LEDGERQ_* environment, inherited) without the manager's own; with ``--health-port P``
    child ``slot`` serves on ``P + slot`` (or a free port when P is 0)."""
    args = list(sys.argv[1:])
    child: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in ("--processes", "--max-memory", "--start-method", "--health-port"):
            skip = "=" not in arg
            continue
        child.append(arg)
    port = _child_health_port(health_port, slot)
    if port is not None:
        child += ["--health-port", str(port)]
    return [sys.executable, "-m", "ledgerq.cli.main", *child, "--managed"]


def forked_child(cli: CliContext, health_port: int | None) -> Callable[[int], int]:
    """What a forked child runs: this very ``worker start`` command as child ``slot`` of its
    manager (the manager's own options dropped, its health port ``P + slot``), returning the
    exit code the command would give, with the application closed as at the command's end."""
    ctx = click.get_current_context()
    command = ctx.command
    params = {
        **ctx.params,
        "processes": None,
        "max_memory": None,
        "start_method": None,
        "managed": True,
    }

    def run(slot: int) -> int:
        from ledgerq.cli.main import exit_code_of

        child = {**params, "health_port": _child_health_port(health_port, slot)}
        try:
            return exit_code_of(lambda: ctx.invoke(command, **child))
        finally:
            cli.close()

    return run


def manage(
    cli: CliContext,
    processes: int,
    max_memory: float | None,
    health_port: int | None,
    *,
    fork: bool,
) -> int:
    """Run ``processes`` children of this command under a ``Manager`` until stopped: forked
    from this process (``fork``, see ``runtime/forked.py``) or each a fresh interpreter."""
    if health_port is not None and health_port + processes - 1 > 65535:
        raise click.UsageError("--health-port + --processes runs past port 65535")
    app = cli.app(tasks_needed=True)
    settings = app.settings
    manager = Manager(
        lambda slot: _child_command(slot, health_port),
        ManagerOptions(
            processes=processes,
            max_memory_mb=max_memory,
            stop_timeout_seconds=settings.shutdown_grace + 30,
            # Dead before its leases run out, so a hung body never outlives its failover.
            hang_after_seconds=settings.worker_ttl / 2,
        ),
        on_crash=lambda pid, how: fail_over_child(app, pid, how),
        run_forked=forked_child(cli, health_port) if fork else None,
    )
    if fork:
        from ledgerq.app.wiring import preload

        preload(settings)
        # What the imports built lives in every child: out of the collector's passes, its
        # pages stay shared with the children instead of being copied by them.
        gc.freeze()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        manager.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return manager.run()


def fail_over_child(app: LedgerQ, pid: int, how: str) -> None:
    """A managed child crashed: fail its worker over now (its jobs back to ``queued``,
    fenced, recorded with the manager as the trigger) rather than after WORKER_TTL, and
    announce the jobs put back. A failure only costs time: the fleet's lifeline still fails
    the worker over once its heartbeat is older than the TTL."""
    from ledgerq.app.application import LedgerQ

    # On an application of its own, closed again: the manager forks its next child from
    # this process, which must hold no pool, connection or thread by then.
    private = LedgerQ(settings=app.settings)
    try:
        _fail_over(private, pid, how)
    finally:
        private.close()


def _fail_over(app: LedgerQ, pid: int, how: str) -> None:
    host = socket.gethostname()
    detected_by = f"manager {host}:{os.getpid()}: child {pid} {how}"
    parts = app.parts
    try:
        events = parts.fleet.fail_over_process(hostname=host, pid=pid, detected_by=detected_by)
    except errors.LedgerqError as exc:
        log.warning("could not fail over a crashed worker process", pid=pid, error=str(exc))
        return
    for event in events:
        log.warning(
            "crashed worker process failed over",
            pid=pid,
            how=how,
            dead_worker=event.worker_id,
            requeued=len(event.requeued),
            dead_jobs=len(event.dead),
            took_ms=round(event.duration_ms, 1),
        )
    requeued = [job_id for event in events for job_id in event.requeued]
    if requeued and parts.announcer is not None:
        try:
            parts.announcer.push(parts.store.hints_for(requeued))
        except errors.LedgerqError as exc:
            log.warning("could not announce failed-over jobs", error=str(exc))


def watch_manager(worker: Worker) -> Callable[[], None]:
    """A manager's child pulses to its manager (see ``runtime/manager.py``: one that falls
    silent is killed as hung) and stops gracefully once its manager is gone (killed with
    SIGKILL, it could not stop its children, which would otherwise run on unsupervised: the
    kernel then makes another process their parent). It pulses until the process exits, so a
    graceful stop's grace period is not taken for a hang; the function returned tells the
    manager the worker stopped and the process is exiting (the interpreter's shutdown ends
    the pulse)."""
    manager = os.getppid()
    raw_fd = os.environ.pop(PULSE_FD_ENV, None)
    pulse_fd = int(raw_fd) if raw_fd is not None and raw_fd.isdigit() else None

    def watch() -> None:
        nonlocal pulse_fd
        while True:
            if pulse_fd is not None:
                try:
                    os.write(pulse_fd, b".")
                except OSError:
                    pulse_fd = None  # the manager is gone: the check below stops the worker
            if not worker.stop_requested and os.getppid() != manager:
                log.warning("the manager is gone; stopping", manager_pid=manager)
                worker.request_stop()
            time.sleep(PULSE_INTERVAL_SECONDS)

    threading.Thread(target=watch, name="ledgerq-manager-watch", daemon=True).start()

    def say_exiting() -> None:
        if pulse_fd is not None:
            with contextlib.suppress(OSError):
                os.write(pulse_fd, EXITING)

    return say_exiting
