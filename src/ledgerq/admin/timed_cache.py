"""TimedCache: a value computed at most once per ``ttl_seconds`` however often it is read, so
a dashboard polling every two seconds (several tabs, several operators) costs the database
one expensive read per interval, not one per request."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class TimedCache(Generic[T]):
    """The last value of ``compute``, reused for ``ttl_seconds``. One caller computes a new
    one at a time; while it does, the others get the previous value rather than queueing
    behind a slow database. Errors of ``compute`` propagate and cache nothing."""

    def __init__(
        self,
        compute: Callable[[], T],
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._compute = compute
        self._ttl = ttl_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._value: tuple[float, T] | None = None

    def get(self) -> T:
        """The value, at most ``ttl_seconds`` old."""
        held = self._value
        if held is not None and self._clock() - held[0] < self._ttl:
            return held[1]
        if not self._lock.acquire(blocking=held is None):
            assert held is not None  # a blocking acquire always succeeds
            return held[1]  # someone is computing right now; the last value will do
        try:
            held = self._value
            if held is None or self._clock() - held[0] >= self._ttl:
                held = (self._clock(), self._compute())
                self._value = held
            return held[1]
        finally:
            self._lock.release()
