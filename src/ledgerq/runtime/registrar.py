"""Registrar: keeps this worker's row in the fleet registry alive. It registers at start,
heartbeats every interval from its own thread (a busy or blocked job cannot starve it),
records a health check every health interval, carries stop requests from the database to the
worker, and deregisters on a clean exit. The database is the only authority for a stop: a
control message (Redis) merely makes it read the worker's stop request now.

A refused heartbeat means the fleet declared this worker dead (it was frozen or cut off past
its TTL) and moved its jobs on: the worker abandons the jobs it no longer owns and registers
again, so it can go on taking work as a fresh member.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import structlog

from ledgerq.core import errors, fleet
from ledgerq.core.operations import EventSink, HealthChecked
from ledgerq.core.ports import WorkerStore
from ledgerq.runtime import probes
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.registrar")

#: Fewest seconds between two stop reads prompted by control messages, so a flood of forged
#: messages costs at most ten indexed reads a second and never delays a heartbeat for long.
WAKE_SPACING_SECONDS = 0.1

#: Seconds between two warnings about control messages the database did not back.
UNBACKED_WARNING_SECONDS = 60.0


class Member(Protocol):
    """What the registrar needs from its worker."""

    def pulse(self) -> fleet.Pulse:
        """Jobs in flight and processed, and the age of the last successful fetch."""

    def abandon_lost_jobs(self) -> int:
        """Give up every job whose fenced heartbeat is refused; return how many."""

    def request_stop(self, *, immediate: bool = False) -> None:
        """Stop the worker (gracefully unless ``immediate``)."""

    def share_with_peers(self, peers_per_slot: float | None) -> None:
        """Adjust the claim pace to the peers' mean rate per slot (None: no peers)."""

    def announce_requeued(self, job_ids: list[int]) -> None:
        """Send the ids of jobs a failover put back to the transport (best effort)."""

    def transport_round_trip_ms(self) -> float | None:
        """Round trip to the transport's server (Redis) in ms; None without one or when down."""

    def lease_confirmed(self, sent_at: float) -> None:
        """The ledger renewed the registration with a write sent at ``sent_at`` (monotonic)."""


class Registrar(PeriodicService):
    """Registration, heartbeat, health checks and stop requests of one worker process.

    ``stall_after_seconds``: a worker that has not fetched for longer while jobs of its
    queues wait is reported unhealthy (alive but not consuming).
    """

    thread_name = "ledgerq-registrar"
    logger = log
    failure_message = "worker heartbeat failed"
    join_seconds: float | None = 10.0

    def __init__(
        self,
        store: WorkerStore,
        registration: fleet.Registration,
        member: Member,
        *,
        interval_seconds: float,
        health_interval_seconds: float,
        stall_after_seconds: float,
        events: EventSink | None = None,
    ) -> None:
        """``events`` receives a ``HealthChecked`` per health check (the
        ``worker_health_checks_total`` metrics count what ``worker_health_checks`` holds)."""
        super().__init__(interval_seconds)
        self._events = events
        self._store = store
        self._registration = registration
        self._member = member
        self._health_interval = health_interval_seconds
        self._stall_after = stall_after_seconds
        self._cpu = probes.CpuMeter()
        self._db_latency_ms: float | None = None
        self._db_error: str | None = None
        self._last_failure = -float("inf")
        self._last_success = -float("inf")
        self._consuming = True  # until a health check finds otherwise
        self._registered = False
        self._stop_seen: fleet.StopMode | None = None
        self._prompted = False  # a control message asked for a stop read
        self._next_beat = self._next_health = 0.0
        self.unbacked_wake_ups = 0
        """Control messages after which the database held no stop request (forged or stale)."""
        self._last_unbacked_warning = -float("inf")

    @property
    def worker_id(self) -> str:
        """The registered worker id."""
        return self._registration.worker_id

    def start(self) -> None:
        """Register (retried on the thread if the database is down) and start beating."""
        self._register()
        now = time.monotonic()
        self._next_beat = now + self.interval
        self._next_health = now + min(self.interval, self._health_interval)
        super().start()

    def stop(self) -> None:
        """Stop beating and mark the worker stopped in the registry."""
        super().stop()
        try:
            self._store.deregister_worker(self.worker_id)
        except errors.StoreError as exc:
            log.warning(
                "could not deregister; the fleet will fail this worker over", error=str(exc)
            )

    def seconds_since_failure(self) -> float:
        """Seconds since this worker last failed to reach the database (inf if never)."""
        return time.monotonic() - self._last_failure

    def _register(self) -> bool:
        sent = time.monotonic()
        try:
            self._store.register_worker(self._registration)
        except errors.StoreError as exc:
            self._last_failure = time.monotonic()
            log.warning("worker registration failed; retrying", error=str(exc))
            return False
        self._registered = True
        self._last_success = time.monotonic()
        self._member.lease_confirmed(sent)
        return True

    def check_stop_request(self) -> None:
        """Read this worker's stop request from the database soon, on the registrar's thread
        (a control message arrived). Thread-safe and cheap: calls in a row cost one read."""
        self._prompted = True
        self.wake()

    def tick(self) -> float:
        """Heartbeat when due, else read a stop request a control message prompted; return
        the wait until the next heartbeat."""
        if time.monotonic() >= self._next_beat:
            # Due heartbeats come first: a flood of wake-ups must not starve them (the
            # fleet would fail this worker over). A heartbeat reads the stop request too.
            self._prompted = False
            self._next_health = self._pulse(self._next_health)
            self._next_beat = time.monotonic() + self.interval
        elif self._prompted:
            self._prompted = False
            self._read_stop_request()
            self.pause(WAKE_SPACING_SECONDS)
        return max(0.0, self._next_beat - time.monotonic())

    def _pulse(self, next_health: float) -> float:
        """Heartbeat (registering first if needed) and check health when due; return when
        the next health check is due."""
        if not self._registered and not self._register():
            return next_health
        self.beat()
        if time.monotonic() >= next_health:
            next_health = time.monotonic() + self._health_interval
            self.check_health()
        return next_health

    def _read_stop_request(self) -> None:
        try:
            wanted = self._store.read_stop_request(self.worker_id)
        except errors.StoreError as exc:
            log.warning("could not read the stop request; the heartbeat will", error=str(exc))
            return
        if wanted is None:
            self.unbacked_wake_ups += 1
            if time.monotonic() - self._last_unbacked_warning >= UNBACKED_WARNING_SECONDS:
                self._last_unbacked_warning = time.monotonic()
                log.warning(
                    "ignored a stop message: the database holds no stop request for this worker",
                    ignored_so_far=self.unbacked_wake_ups,
                )
            return
        self._obey(wanted, prompted_by="control message")

    def beat(self) -> None:
        """One heartbeat; reacts to a refusal (declared dead) and to stop requests."""
        began = time.perf_counter()
        sent = time.monotonic()
        try:
            reply = self._store.heartbeat_worker(self.worker_id, self._member.pulse())
        except errors.StoreError as exc:
            self._db_error = str(exc)
            self._last_failure = time.monotonic()
            log.warning("worker heartbeat failed", error=str(exc))
            return
        self._db_latency_ms = (time.perf_counter() - began) * 1000.0
        self._db_error = None
        self._last_success = time.monotonic()
        if reply is None:
            abandoned = self._member.abandon_lost_jobs()
            log.warning(
                "this worker was declared dead by the fleet; its jobs were moved on",
                worker_id=self.worker_id,
                abandoned_jobs=abandoned,
            )
            self._registered = False
            self._register()
            return
        self._member.lease_confirmed(sent)
        self._member.share_with_peers(reply.peers_jobs_per_second_per_slot)
        if reply.stop_requested is not None:
            self._obey(reply.stop_requested, prompted_by="heartbeat")

    def _obey(self, wanted: fleet.StopMode, *, prompted_by: str) -> None:
        if self._stop_seen is not None:
            return
        self._stop_seen = wanted
        log.info("stop requested through the database", mode=wanted.value, seen_at=prompted_by)
        self._member.request_stop(immediate=wanted is fleet.StopMode.IMMEDIATE)

    def check_health(self) -> fleet.HealthCheck:
        """Measure, judge and record one health check (recording is best effort)."""
        pulse = self._member.pulse()
        problems: list[str] = []
        if self._db_error is not None:
            problems.append(f"database: {self._db_error}"[:300])
        stalled = (
            pulse.last_fetch_age_seconds is not None
            and pulse.last_fetch_age_seconds > self._stall_after
        )
        self._consuming = not (stalled and self._ready_jobs(self._registration.queues) > 0)
        if not self._consuming:
            problems.append(
                f"not consuming: no fetch for {pulse.last_fetch_age_seconds:.0f} s"
                " while jobs of its queues wait"
            )
        check = fleet.HealthCheck(
            worker_id=self.worker_id,
            db_latency_ms=self._db_latency_ms,
            transport_latency_ms=self._member.transport_round_trip_ms(),
            memory_mb=probes.memory_mb(),
            cpu_percent=self._cpu.read(),
            jobs_in_flight=pulse.jobs_in_flight,
            last_fetch_age_seconds=pulse.last_fetch_age_seconds,
            problems=tuple(problems),
        )
        recorded = True
        try:
            self._store.record_health_check(check)
        except errors.StoreError as exc:
            recorded = False
            log.warning("health check not recorded", error=str(exc))
        if self._events is not None:
            self._events.emit(HealthChecked(ok=recorded and not problems))
        if problems:
            log.warning("worker unhealthy", problems=problems)
        return check

    def readiness(self) -> dict[str, tuple[bool, str]]:
        """Whether this worker can reach its database (registered, and its last heartbeat
        or registration within three heartbeat intervals succeeded) and is consuming (its
        last health check found no stall while jobs wait): each check's outcome and a short
        detail (no driver error text: the health port needs no token)."""
        since = time.monotonic() - self._last_success
        reached = self._registered and self._db_error is None and since <= 3 * self.interval
        database = (
            (True, f"heartbeat {since:.1f} s ago")
            if reached
            else (False, "registration or heartbeat failing")
        )
        consuming = (
            (True, "fetching")
            if self._consuming
            else (False, "no fetch while jobs of its queues wait")
        )
        return {"database": database, "consuming": consuming}

    def _ready_jobs(self, queues: Sequence[str]) -> int:
        try:
            return self._store.count_ready_jobs(queues)
        except errors.StoreError:
            return 0
