"""OutageTracker: the redis driver's fallback state machine, kept free of the redis client.
Redis is marked down on its first failure (switching to the fallback, logged once), probed
with a doubling backoff, and marked up (switching back) when it answers again."""

from __future__ import annotations

import threading
import time

import structlog

log = structlog.get_logger("ledgerq.transport.redis")

#: Backoff between probes of a Redis server that failed, doubling up to the cap.
PROBE_FIRST_SECONDS = 0.5
PROBE_MAX_SECONDS = 5.0


class OutageTracker:
    """Whether one transport's Redis is down and when to probe it next; thread-safe."""

    def __init__(self, *, has_fallback: bool) -> None:
        """``has_fallback``: a failure switches to polling (the ``auto`` driver)."""
        self._has_fallback = has_fallback
        self._lock = threading.Lock()
        self._down = False
        self._next_probe = 0.0
        self._probe_backoff = PROBE_FIRST_SECONDS
        self.fallback_active = False
        """True while a worker polls the database because Redis failed."""
        self.fallbacks = 0
        """How often this transport fell back to polling."""

    def probe_due(self) -> bool:
        """Whether the backoff since the last failure has run out."""
        return time.monotonic() >= self._next_probe

    def skipping(self) -> bool:
        """Whether Redis is down and not due for a probe yet: calls should fail at once."""
        return self._down and not self.probe_due()

    def failed(self, exc: BaseException) -> None:
        """Record a failure: the first marks Redis down, later ones double the backoff."""
        with self._lock:
            now = time.monotonic()
            if not self._down:
                self._down = True
                self._probe_backoff = PROBE_FIRST_SECONDS
                if self._has_fallback:
                    self.fallback_active = True
                    self.fallbacks += 1
                    log.warning(
                        "Redis failed; falling back to polling the database", error=str(exc)
                    )
                else:
                    log.warning("Redis failed", error=str(exc))
            else:
                self._probe_backoff = min(self._probe_backoff * 2, PROBE_MAX_SECONDS)
            self._next_probe = now + self._probe_backoff

    def recovered(self) -> bool:
        """Record that Redis answered: marks it up again if it was down. True if this ended
        a fallback (the caller then puts the fallback to rest)."""
        if not self._down:
            return False
        with self._lock:
            if not self._down:
                return False
            self._down = False
            ended_fallback = self.fallback_active
            if ended_fallback:
                log.warning("Redis answers again; back to the redis driver")
            else:
                log.info("Redis answers again")
            self.fallback_active = False
            return ended_fallback
