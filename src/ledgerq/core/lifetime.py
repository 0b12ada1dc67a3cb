"""Lifetime figures per queue and task (the SMS system's ``sms:stats``: total queued,
processed, failed since the beginning). They are the job rows still present plus the rows
the retention pruner deleted (counted in ``lifetime_totals`` in the transaction of the
delete), so a prune never changes them and no job's hot path writes a shared counter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

#: The state name under which jobs deleted unstarted past ``expires_at`` are counted.
EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class LifetimeTotal:
    """Jobs of one queue and task since the beginning: ``enqueued`` (every job ever
    accepted), and those that ``succeeded``, went ``dead`` (attempts spent), were
    ``cancelled``, or ``expired`` unstarted. Queue and task ``*`` mean "all"."""

    queue: str
    task: str
    enqueued: int = 0
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0
    expired: int = 0

    def figures(self) -> dict[str, int]:
        """The counts by name (without queue and task), for JSON and tables."""
        values = asdict(self)
        del values["queue"], values["task"]
        return values

    def plus(self, other: LifetimeTotal, *, queue: str, task: str) -> LifetimeTotal:
        """The sum of two totals, labelled ``queue`` and ``task``."""
        return LifetimeTotal(
            queue,
            task,
            self.enqueued + other.enqueued,
            self.succeeded + other.succeeded,
            self.dead + other.dead,
            self.cancelled + other.cancelled,
            self.expired + other.expired,
        )


def from_counts(counts: Iterable[tuple[str, str, str, int]]) -> list[LifetimeTotal]:
    """Totals per (queue, task) from ``(queue, task, state, count)`` rows, where the rows
    still present and the pruned ones may both appear: every row counts as enqueued, and the
    finished states (and ``expired``) count under their own name. Sorted by queue, task."""
    summed: dict[tuple[str, str], dict[str, int]] = {}
    for queue, task, state, count in counts:
        figures = summed.setdefault((queue, task), {})
        figures["enqueued"] = figures.get("enqueued", 0) + count
        if state in ("succeeded", "dead", "cancelled", EXPIRED):
            figures[state] = figures.get(state, 0) + count
    return [LifetimeTotal(q, t, **f) for (q, t), f in sorted(summed.items())]


def by_queue(totals: Iterable[LifetimeTotal]) -> dict[str, LifetimeTotal]:
    """The totals summed over tasks, per queue (task ``*``)."""
    out: dict[str, LifetimeTotal] = {}
    for total in totals:
        before = out.get(total.queue, LifetimeTotal(total.queue, "*"))
        out[total.queue] = before.plus(total, queue=total.queue, task="*")
    return out


def documents(totals: Iterable[LifetimeTotal]) -> dict[str, dict[str, object]]:
    """JSON per queue: its figures summed over tasks, and ``tasks``: each task's figures."""
    listed = list(totals)
    out: dict[str, dict[str, object]] = {}
    for queue, total in by_queue(listed).items():
        tasks: Mapping[str, dict[str, int]] = {
            t.task: t.figures() for t in listed if t.queue == queue
        }
        out[queue] = {**total.figures(), "tasks": dict(tasks)}
    return out
