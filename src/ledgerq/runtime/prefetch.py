"""How many claimed jobs a worker may hold beyond its running slots (prefetch).

A fixed number (``PREFETCH=N``) is kept as given. Unset, the room follows the jobs: a worker
holds about ``AUTO_HORIZON_SECONDS`` of work beyond its slots at the recent mean duration,
between the concurrency and ``AUTO_MAX_FACTOR`` times it. Short jobs then come in larger
batches (fewer round trips per job), while long jobs keep the small prefetch that keeps the
sharing between workers fair (a prefetched long job waits behind a running one)."""

from __future__ import annotations

#: Seconds of work (at the recent mean job duration) the automatic prefetch holds ahead.
AUTO_HORIZON_SECONDS = 0.02
#: The automatic prefetch is at most this many times the concurrency.
AUTO_MAX_FACTOR = 2
#: Weight of the newest duration in the running mean.
_EWMA_WEIGHT = 0.05


class PrefetchRoom:
    """The executor's capacity: running slots plus prefetch, fixed or following the jobs.
    Not thread-safe: the executor calls it under its own lock."""

    def __init__(self, concurrency: int, prefetch: int | None) -> None:
        """``prefetch`` None: automatic (starts at the concurrency)."""
        self._concurrency = concurrency
        self._fixed = prefetch
        self._mean_seconds: float | None = None
        self.capacity = concurrency + (concurrency if prefetch is None else prefetch)

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
        ahead = int(self._concurrency * AUTO_HORIZON_SECONDS / max(mean, 1e-6))
        prefetch = min(max(ahead, self._concurrency), AUTO_MAX_FACTOR * self._concurrency)
        self.capacity = self._concurrency + prefetch
