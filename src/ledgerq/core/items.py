"""Batch items: the port that records each finished item of a job, and the progress derived
from those records. An item's record is the proof its effect happened, so a retry skips it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ledgerq.core import errors
from ledgerq.core.job import Claim

#: Longest item key, in characters (the ``job_items.item_key`` column).
MAX_ITEM_KEY = 255


def check_item_key(key: object) -> str:
    """Return ``key`` as the string stored for it; raise ``InvalidJob`` for an empty or too
    long key (ints and other plain values are turned into their ``str``)."""
    text = key if isinstance(key, str) else str(key)
    if not 0 < len(text) <= MAX_ITEM_KEY:
        raise errors.InvalidJob(f"item keys must be 1 to {MAX_ITEM_KEY} characters, got {text!r}")
    return text


@dataclass(frozen=True, slots=True)
class ItemProgress:
    """How far a job's items are: ``done`` of ``total`` (None before ``ctx.items()`` ran),
    the rate of the current attempt in items per second and the estimated seconds left."""

    total: int | None
    done: int
    done_this_attempt: int = 0
    rate_per_second: float | None = None
    eta_seconds: float | None = None
    last_item_at: datetime | None = None

    @property
    def fraction(self) -> float | None:
        """``done / total`` between 0 and 1, or None without a total."""
        if not self.total:
            return None
        return min(self.done / self.total, 1.0)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready fields (times as ISO 8601)."""
        return {
            "total": self.total,
            "done": self.done,
            "done_this_attempt": self.done_this_attempt,
            "rate_per_second": self.rate_per_second,
            "eta_seconds": self.eta_seconds,
            "last_item_at": self.last_item_at.isoformat() if self.last_item_at else None,
        }


def estimate(
    total: int | None, done: int, attempt_items: int, span_seconds: float | None
) -> tuple[float | None, float | None]:
    """Rate (items/s) of the current attempt from its ``attempt_items`` recorded over
    ``span_seconds``, and the seconds left for ``total - done`` at that rate."""
    if attempt_items < 2 or not span_seconds or span_seconds <= 0:
        return None, None
    rate = (attempt_items - 1) / span_seconds
    if total is None:
        return rate, None
    return rate, max(total - done, 0) / rate


class JobItemStore(Protocol):
    """Records finished items of running jobs. Every write is fenced on the claim: a write of
    an attempt that no longer owns its job raises ``LeaseLost`` and changes nothing."""

    def begin_items(self, claim: Claim, *, total: int) -> set[str]:
        """Store ``total`` as the job's item count, count as progress, and return the keys
        already finished (by any attempt)."""

    def record_items(
        self,
        claim: Claim,
        items: Sequence[tuple[str, str | None]],
        *,
        connection: object | None = None,
    ) -> None:
        """Record ``(key, result_json)`` items as done and the job as progressing, inside
        ``connection``'s transaction when given (so the items' effects commit with them).
        Raise ``ItemAlreadyDone`` if a key was recorded before."""

    def item_progress(self, job_id: int) -> ItemProgress:
        """The job's progress (``done == 0`` and ``total is None`` for a job without items)."""


class ItemAlreadyDone(errors.StoreError):
    """An item recorded twice: the transaction that tried it must roll back its effect."""
