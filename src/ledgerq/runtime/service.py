"""The runtime's service kernel: ``PeriodicService``, the one loop every periodic service of a
worker runs (its own named daemon thread, a stop event, a tick every interval, an error
policy, a bounded join), and ``ServiceGroup``, which starts services in order and stops them
in reverse."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ledgerq.core import errors


class Service(Protocol):
    """Anything a ``ServiceGroup`` starts and stops."""

    def start(self) -> None:
        """Start the service."""

    def stop(self) -> None:
        """Stop the service."""


class PeriodicService:
    """Calls ``tick()`` on its own daemon thread (``thread_name``) until stopped; a subclass
    sets the class attributes below and calls ``__init__`` with its interval.

    The first tick comes ``first_delay`` seconds after ``start`` (one interval unless set),
    each next one ``interval`` seconds after the last, or after what ``tick`` returns when it
    returns a number. ``wake()`` cuts the current wait short. Error policy: a ``StoreError``
    (the ledger is down or failing over) is counted in ``failures`` and logged as a warning
    with ``failure_message``, and the loop goes on; anything else ends the thread.
    ``stop`` joins the thread for at most ``join_seconds`` (None: it does not wait).
    """

    thread_name: str
    logger: Any
    """The service's own structlog logger."""
    failure_message: str
    first_delay: float | None = None
    join_seconds: float | None = 5.0

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.failures = 0
        """Ticks that ended in a store error."""
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by ``wake`` and by ``stop``
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)

    def tick(self) -> float | None:
        """One round of the service's work; may return the seconds until the next one."""
        raise NotImplementedError

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for (a long tick checks it between its steps)."""
        return self._stop.is_set()

    def start(self) -> None:
        """Start ticking on the service's thread."""
        self._thread.start()

    def wake(self) -> None:
        """Tick now rather than at the end of the current wait (thread-safe)."""
        self._wake.set()

    def pause(self, seconds: float) -> None:
        """Wait ``seconds`` on the service's thread; only a stop cuts it short."""
        self._stop.wait(seconds)

    def request_stop(self) -> None:
        """Ask the loop to end after the current tick (safe from a signal handler)."""
        self._stop.set()
        self._wake.set()

    def stop(self) -> None:
        """Ask the loop to end and wait for it within the join bound."""
        self.request_stop()
        if self.join_seconds is not None and self._thread.is_alive():
            self._thread.join(self.join_seconds)

    def run(self) -> None:
        """The loop (the service's thread runs it; a foreground caller may too)."""
        wait = self.interval if self.first_delay is None else self.first_delay
        while True:
            self._wake.wait(wait)
            if self._stop.is_set():
                return
            self._wake.clear()
            wait = self.interval
            try:
                due_in = self.tick()
            except errors.StoreError as exc:
                self.failures += 1
                self.logger.warning(self.failure_message, error=str(exc))
            else:
                if due_in is not None:
                    wait = due_in


class Steps:
    """A service made of two callables, for the steps of a group that are not services."""

    def __init__(
        self, start: Callable[[], None] = lambda: None, stop: Callable[[], None] = lambda: None
    ) -> None:
        self.start = start
        self.stop = stop


class ServiceGroup:
    """Services started in the order given and stopped in reverse order."""

    def __init__(self, services: Sequence[Service]) -> None:
        self._services = tuple(services)
        self._started: list[Service] = []

    def start(self) -> None:
        """Start every service in order."""
        for service in self._services:
            service.start()
            self._started.append(service)

    def stop(self) -> None:
        """Stop the started services, last started first."""
        while self._started:
            self._started.pop().stop()
