"""What a handler may raise to decide its job's outcome itself, whatever the task's retry rules:

- ``Retry(delay=30, reason="...")``: run again after ``delay`` seconds (the policy's backoff
  when None). It counts as an attempt: with none left the job is ``dead``, as for any failure.
- ``Cancel(reason)``: the job ends ``cancelled`` now.
- ``Discard(reason)``: the job ends ``dead`` now, whatever attempts it has left.

Each is stored as the job's error with its ``kind`` (``retry``, ``cancelled``, ``discarded``)
and ``reason``. They are plain ``Exception``s, not ``LedgerqError``s: ledgerq never raises
them, the handler does."""

from __future__ import annotations

import math


class JobOutcome(Exception):
    """Base of the outcomes a handler raises; ``kind`` is stored with the job's error."""

    kind: str = "outcome"

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class Retry(JobOutcome):
    """Run the job again after ``delay`` seconds (None: the task's backoff); counts as an
    attempt, so a job with no attempt left is ``dead``."""

    kind = "retry"

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        if delay is not None and (
            isinstance(delay, bool)
            or not isinstance(delay, int | float)
            or not math.isfinite(delay)
        ):
            raise ValueError(f"Retry(delay=...) must be a number of seconds, not {delay!r}")
        if delay is not None and delay < 0:
            raise ValueError(f"Retry(delay=...) must not be negative, not {delay!r}")
        super().__init__(reason)
        self.delay = None if delay is None else float(delay)


class Cancel(JobOutcome):
    """End the job ``cancelled`` now."""

    kind = "cancelled"


class Discard(JobOutcome):
    """End the job ``dead`` now, whatever attempts it has left."""

    kind = "discarded"
