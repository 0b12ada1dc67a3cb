"""How many claimed jobs a worker may hold beyond its running slots (prefetch).

A fixed number (``PREFETCH=N``) is kept as given. Unset, the room follows the jobs: a worker
holds about ``AUTO_HORIZON_SECONDS`` of work beyond its slots at the recent mean duration, at
most ``AUTO_MAX_FACTOR`` times the concurrency. Short jobs then come in larger batches (fewer
round trips per job), while jobs longer than the horizon per slot get no prefetch at all: a
prefetched long job would wait behind a running one while another worker idles (seen: 6 jobs
of 20 s on 2 workers of 4 slots all went to one worker, 2 of them 20 s late). Until a first
duration is known the prefetch is 0 too, so the first claims of a fleet that just started
(or just woke) spread the jobs over the workers; the first short jobs raise it at once.

Jobs of limited tasks (rate, concurrency, circuit breaker) hold the automatic prefetch at 0
for ``LIMITED_HOLD_SECONDS``: their handlers may be short, but a job claimed ahead would sit
in this worker's inbox waiting for its admission, as a claim its peers cannot take."""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds of work (at the recent mean job duration) the automatic prefetch holds ahead.
AUTO_HORIZON_SECONDS = 0.02
#: The automatic prefetch is at most this many times the concurrency.
AUTO_MAX_FACTOR = 4
#: After a job of a limited task, the automatic prefetch stays at its floor this long.
LIMITED_HOLD_SECONDS = 10.0
#: Weight of the newest duration in the running mean.
_EWMA_WEIGHT = 0.05


class PrefetchRoom:
    """The executor's capacity: running slots plus prefetch, fixed or following the jobs.
    Not thread-safe: the executor calls it under its own lock."""

    def __init__(
        self,
        concurrency: int,
        prefetch: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``prefetch`` None: automatic (starts at 0)."""
        self._concurrency = concurrency
        self._fixed = prefetch
        self._clock = clock
        self._mean_seconds: float | None = None
        self._floor_until = float("-inf")
        self.capacity = concurrency + (prefetch or 0)

    @property
    def automatic(self) -> bool:
        """Whether the prefetch follows the job durations."""
        return self._fixed is None

    def observe(self, seconds: float) -> None:
        """Take in how long a finished job ran (only used when automatic)."""
        if self._fixed is not None:
            return
        mean = self._mean_seconds
        mean = seconds if mean is None else mean + _EWMA_WEIGHT * (seconds - mean)
        self._mean_seconds = mean
        if self._clock() < self._floor_until:
            return
        ahead = int(self._concurrency * AUTO_HORIZON_SECONDS / max(mean, 1e-6))
        self.capacity = self._concurrency + min(ahead, AUTO_MAX_FACTOR * self._concurrency)

    def observe_limited(self) -> None:
        """Take in that a job of a limited task came through (admitted or held back): the
        automatic prefetch drops to 0 and stays there for ``LIMITED_HOLD_SECONDS``."""
        if self._fixed is not None:
            return
        self._floor_until = self._clock() + LIMITED_HOLD_SECONDS
        self.capacity = self._concurrency
