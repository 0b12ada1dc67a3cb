"""Retry policy: exponential backoff with jitter, then ``dead`` once attempts are exhausted."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed job is retried.

    The n-th retry waits ``min(cap_seconds, base_seconds * 2**(n-1))`` scaled by a random factor
    in ``[1 - jitter, 1 + jitter]``. ``max_attempts`` counts every start of the job, the first
    included; once a failing attempt reaches it, the job is ``dead``.
    """

    max_attempts: int = 3
    base_seconds: float = 1.0
    cap_seconds: float = 3600.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_seconds < 0 or self.cap_seconds < 0:
            raise ValueError("backoff seconds must not be negative")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must lie between 0 and 1")

    def should_retry(self, attempt: int) -> bool:
        """Whether a job whose attempt number ``attempt`` just failed gets another run."""
        return attempt < self.max_attempts

    def delay_seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the run that follows failed attempt ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        # Cap the exponent first so a job with a huge attempt count cannot overflow a float.
        raw = min(self.cap_seconds, self.base_seconds * 2.0 ** min(exponent, 62))
        factor = 1.0 + self.jitter * (2.0 * (rng or random).random() - 1.0)
        return max(0.0, raw * factor)
