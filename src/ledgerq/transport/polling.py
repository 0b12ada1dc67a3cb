"""PollingTransport (the ``dbpoll`` driver): push is a no-op, pull just waits.

With a Waker (PostgreSQL LISTEN/NOTIFY) an idle worker wakes within milliseconds of an
enqueue; without one it polls every interval.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ledgerq.core.job import JobHint
from ledgerq.core.ports import Waker


class PollingTransport:
    """The Transport of the ``dbpoll`` driver."""

    #: Its ``push`` does nothing (the rows themselves are the queue): producers build no hints.
    carries_hints = False

    def __init__(self, waker: Waker | None = None) -> None:
        self._waker = waker
        self._interrupted = threading.Event()
        self.fallback_active = False

    def push(self, hints: Sequence[JobHint]) -> None:
        """Nothing to do: the rows themselves are the queue."""

    def carries_ids(self) -> bool:
        """Never: workers claim by query."""
        return False

    def pull(self, *, queues: Sequence[str], limit: int = 0, timeout: float) -> list[int]:
        """Wait up to ``timeout`` for a wake-up; never returns ids (the claim queries)."""
        if self._interrupted.is_set():
            self._interrupted.clear()
            return []
        if self._waker is None:
            self._interrupted.wait(timeout)
        else:
            # Wake-ups come from the waker; check the interrupt flag in short slices.
            remaining = timeout
            while remaining > 0 and not self._interrupted.is_set():
                step = min(remaining, 0.25)
                if self._waker.wait(step):
                    break
                remaining -= step
        self._interrupted.clear()
        return []

    def round_trip_seconds(self) -> float | None:
        """No server of its own: None."""
        return None

    def interrupt(self) -> None:
        """Make a blocked ``pull`` return now."""
        self._interrupted.set()

    def rest(self) -> None:
        """Not in use for now (Redis answers again): the waker stops listening until the next
        pull, so NOTIFYs no longer wake this worker for nothing."""
        if self._waker is not None:
            self._waker.rest()

    def close(self) -> None:
        """Release the waker's connection."""
        if self._waker is not None:
            self._waker.close()
