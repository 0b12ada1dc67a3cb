"""Bulk retry of dead jobs (``ledgerq queue requeue-failed``, ``POST
/admin/queue/requeue-failed``): which dead jobs it selects, the ``--since`` grammar, and the
counts it reports. Pure data; the store does the fenced move (only rows still ``dead`` when
the update runs are moved)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from ledgerq.core.job import as_utc

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


@dataclass(frozen=True, slots=True)
class DeadJobFilter:
    """The ``dead`` jobs to retry: every given field must match. ``died_since`` (aware UTC)
    keeps the jobs that became dead at or after it (their ``finished_at``)."""

    queue: str | None = None
    task: str | None = None
    died_since: datetime | None = None


@dataclass(frozen=True, slots=True)
class RequeueReport:
    """What a bulk retry did (or, with ``dry_run``, would do): dead jobs per
    ``(queue, task)`` moved back to ``queued`` (or matched). ``touched_ids`` are the ids the
    fenced update was tried on; those now ``queued`` are announced to the transport."""

    dry_run: bool
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    touched_ids: tuple[int, ...] = ()

    @property
    def total(self) -> int:
        """Jobs moved (or matched, on a dry run)."""
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, object]:
        """JSON-ready: ``dry_run``, ``total`` and ``counts`` as a list of queue/task/jobs."""
        return {
            "dry_run": self.dry_run,
            "total": self.total,
            "counts": [
                {"queue": q, "task": t, "jobs": n} for (q, t), n in sorted(self.counts.items())
            ],
        }


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """The moment ``text`` names: a duration back from ``now`` (``90s``, ``15m``, ``2h``,
    ``7d``, ``1w``) or an ISO-8601 time (naive means UTC). Raise ``ValueError`` naming the
    accepted forms otherwise, or for a time in the future."""
    now = now or datetime.now(UTC)
    found = _DURATION.match(text)
    if found:
        return now - timedelta(seconds=float(found.group(1)) * _UNITS[found.group(2)])
    try:
        moment = as_utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise ValueError(
            f"--since {text!r} is neither a duration (90s, 15m, 2h, 7d, 1w) nor an ISO-8601"
            " time (2026-01-31T12:00:00Z)"
        ) from None
    if moment > now + timedelta(minutes=1):
        raise ValueError(f"--since {text!r} lies in the future")
    return moment
