"""Pacer: fair sharing between workers of the same queues. Each worker reports how many jobs
it finished since the current backlog began, per second (over at most a recent window); a
worker running ahead of its peers' mean waits a little before each claim while there is a
backlog (the fetcher scales the delay by its last batch), so the slower ones catch up. Without
a backlog, or alone, it never waits.

Measured from the start of the backlog, the rate is the count since then over the same elapsed
time for every worker (they see a backlog within a poll of each other), so peers steer on
counts: a worker that stalled early stays behind in the mean until it caught up in jobs, and
the others stay braked until then. A rate over a sliding window forgot such a stall once the
window had slid past it, and the worker stayed behind for good."""

from __future__ import annotations

import collections
import time

#: A worker more than this fraction above its peers' mean rate slows down.
TOLERANCE = 0.02
#: Longest wait before one claim, in seconds.
MAX_DELAY_SECONDS = 0.25
_MIN_DELAY_SECONDS = 0.002


class Pacer:
    """Measures this worker's rate and turns the peers' mean rate into a per-claim delay."""

    def __init__(self, *, window_seconds: float) -> None:
        self._window = window_seconds
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        self.rate = 0.0
        #: (monotonic time, count) the last sample measured its rate from.
        self._base = (0.0, 0)
        self._peers_rate: float | None = None

    def sample(self, processed: int, backlog_since: float | None = None) -> float:
        """Record the running total of finished jobs; return the rate since the backlog began
        (``backlog_since``, monotonic) or, with none or one older than the window, over the
        window."""
        now = time.monotonic()
        self._samples.append((now, processed))
        while len(self._samples) > 2 and self._samples[1][0] < now - self._window:
            self._samples.popleft()
        first_at, first = self._samples[0]
        if backlog_since is not None and first_at <= backlog_since < now:
            # The count at the last sample before the backlog began: the worker was idle
            # (or between backlogs) since then, so it is the count when the backlog began.
            first = next(n for at, n in reversed(self._samples) if at <= backlog_since)
            first_at = backlog_since
        self._base = (first_at, first)
        self.rate = (processed - first) / (now - first_at) if now > first_at else 0.0
        return self.rate

    def adjust(self, peers_rate: float | None) -> float:
        """Steer the delay from the peers' mean rate (None: alone); return the new delay.

        The delay grows with the square of the lead (2 ms at 2 % ahead, 8 ms at 4 %, 18 ms at
        6 %, at most ``MAX_DELAY_SECONDS``) and drops to zero as soon as the lead is within the
        tolerance: a small lead, a drain's usual noise, costs little throughput, and a large
        one, a peer that fell behind, is won back quickly.
        A lead the brake does not win back grows in jobs, so the brake grows with it; a brake
        that outlived the lead (a delay grown per heartbeat and halved per heartbeat after)
        let the slower workers overshoot at the end of a drain."""
        self._peers_rate = peers_rate
        return self._delay(self.rate)

    def delay_now(self, processed: int) -> float:
        """The delay for a claim now: this worker's rate from its running total at this
        moment against the peers' mean of the last heartbeat. Between heartbeats a worker
        that surges (a no-op drain can run 2,000 jobs a second) would otherwise keep the
        brake of its last heartbeat, and gain hundreds of jobs before the next one."""
        if not self._peers_rate:
            return 0.0
        base_at, base = self._base
        now = time.monotonic()
        return self._delay((processed - base) / (now - base_at) if now > base_at else 0.0)

    def _delay(self, rate: float) -> float:
        peers_rate = self._peers_rate
        if peers_rate is None or peers_rate <= 0 or rate <= peers_rate * (1 + TOLERANCE):
            return 0.0
        lead = rate / peers_rate - 1
        return min(_MIN_DELAY_SECONDS * (lead / TOLERANCE) ** 2, MAX_DELAY_SECONDS)
