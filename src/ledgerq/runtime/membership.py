"""Membership: a worker's part in the fleet, wired in one place: the registrar (registration,
heartbeat, health, stop requests) and the lifeline (failover of dead workers)."""

from __future__ import annotations

import os
import socket
from importlib import metadata
from typing import TYPE_CHECKING

from ledgerq.core import fleet
from ledgerq.core.operations import EventSink
from ledgerq.core.ports import WorkerStore
from ledgerq.runtime.lifeline import Lifeline
from ledgerq.runtime.registrar import Member, Registrar

if TYPE_CHECKING:
    from ledgerq.runtime.worker_setup import WorkerOptions


def _version() -> str:
    try:
        return metadata.version("ledgerq")
    except metadata.PackageNotFoundError:
        return "unknown"


def stall_after_seconds(options: WorkerOptions) -> float:
    """How long without a fetch, while jobs wait, makes a worker unhealthy."""
    return max(3 * options.poll_interval_seconds, 2 * options.health_check_interval_seconds)


class Membership:
    """Starts and stops the fleet services of one worker."""

    def __init__(
        self,
        store: WorkerStore,
        member: Member,
        options: WorkerOptions,
        worker_id: str,
        tasks: tuple[str, ...] = (),
        events: EventSink | None = None,
    ) -> None:
        """``tasks``: the names the worker's application registers, declared to the fleet;
        ``events`` receives the registrar's health checks."""
        self.worker_id = worker_id
        registration = fleet.Registration(
            worker_id=self.worker_id,
            hostname=socket.gethostname(),
            pid=os.getpid(),
            queues=options.queues,
            concurrency=options.concurrency,
            version=_version(),
            tasks=tasks,
        )
        self.registrar = Registrar(
            store,
            registration,
            member,
            interval_seconds=options.heartbeat_interval_seconds,
            health_interval_seconds=options.health_check_interval_seconds,
            stall_after_seconds=stall_after_seconds(options),
            events=events,
        )
        self.lifeline = Lifeline(
            store,
            self.worker_id,
            ttl_seconds=options.lease_seconds,
            interval_seconds=options.failover_check_interval_seconds,
            seconds_since_outage=self.registrar.seconds_since_failure,
            on_requeued=member.announce_requeued,
        )

    def start(self) -> None:
        """Register, then start beating and failing over."""
        self.registrar.start()
        self.lifeline.start()

    def renew(self) -> None:
        """Heartbeat the registration now (a held job's lease may have lapsed, see
        ``LeaseGuard``); a refusal makes the worker abandon what it lost and register again."""
        self.registrar.beat()

    def stop(self) -> None:
        """Stop failing over, then deregister (a clean exit)."""
        self.lifeline.stop()
        self.registrar.stop()

    def check_stop_request(self) -> None:
        """A control message arrived: read this worker's stop request from the database now
        (the message itself is never obeyed)."""
        self.registrar.check_stop_request()
