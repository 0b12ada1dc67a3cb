"""LoginThrottle: wrong sign-ins per client address, so a token cannot be guessed at the
speed of the network and a flood of guesses does not flood the audit log.

Kept in the memory of the ``ledgerq serve`` process (one per environment, see
deploy/systemd): a restart forgets the failures, which costs an attacker a restart per
``max_failures`` guesses."""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable


class LoginThrottle:
    """After ``max_failures`` wrong sign-ins from one address within ``window_seconds``,
    that address is refused until the oldest of them leaves the window. At most
    ``max_clients`` addresses are remembered (the oldest are forgotten first)."""

    def __init__(
        self,
        *,
        max_failures: int = 5,
        window_seconds: float = 60.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_failures = max_failures
        self._window = window_seconds
        self._max_clients = max_clients
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()  # sign-ins run in the server's thread pool

    def retry_after(self, client: str) -> int:
        """Whole seconds until ``client`` may try again; 0 when it may now."""
        with self._lock:
            times = self._recent(client)
            if len(times) < self._max_failures:
                return 0
            return max(1, math.ceil(times[0] + self._window - self._clock()))

    def record_failure(self, client: str) -> bool:
        """Count a wrong sign-in; True when this one starts the client's lockout."""
        with self._lock:
            times = self._recent(client)
            times.append(self._clock())
            self._failures[client] = times
            while len(self._failures) > self._max_clients:
                del self._failures[next(iter(self._failures))]
            return len(times) == self._max_failures

    def reset(self, client: str) -> None:
        """Forget ``client``'s failures (after a good sign-in)."""
        with self._lock:
            self._failures.pop(client, None)

    def _recent(self, client: str) -> deque[float]:
        times = self._failures.pop(client, deque())
        horizon = self._clock() - self._window
        while times and times[0] <= horizon:
            times.popleft()
        if times:
            self._failures[client] = times  # re-inserted: most recently seen last
        return times
