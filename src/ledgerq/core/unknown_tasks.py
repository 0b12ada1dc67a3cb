"""What becomes of a claimed job whose task the worker's application does not register (a
rolling deploy: an old worker meets a new task). The job goes back without spending an
attempt, after a delay that grows with each put-back, while a live worker declares the task
or the grace period since its first put-back lasts; only then is it buried. Pure policy."""

from __future__ import annotations

from dataclasses import dataclass

#: The error kind of a job buried (or waiting) for want of a worker that knows its task.
KIND = "unknown_task"


@dataclass(frozen=True, slots=True)
class UnknownTaskPolicy:
    """Times in seconds. ``grace_seconds``: how long, from a job's first put-back, no live
    worker may declare its task before the job is buried (0: at once)."""

    grace_seconds: float = 300.0
    first_delay_seconds: float = 1.0
    max_delay_seconds: float = 30.0

    def delay_seconds(self, put_backs: int, *, declared: bool = False) -> float:
        """The wait before the job may be claimed again, after ``put_backs`` earlier ones:
        ``first_delay_seconds`` while a live worker declares the task (it should get the job
        soon), else doubling from there up to ``max_delay_seconds``."""
        if declared:
            return self.first_delay_seconds
        return min(self.first_delay_seconds * 2.0 ** min(put_backs, 30), self.max_delay_seconds)

    def buries(self, *, declared: bool, waited_seconds: float) -> bool:
        """Whether to bury: no live worker declares the task and the grace has run out."""
        return not declared and waited_seconds >= self.grace_seconds


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the ledger did with the job: ``deferred`` by ``delay_seconds``, or not (then
    ``buried`` says the caller must write it ``dead``). ``waited_seconds`` counts from the
    first put-back; ``declared``: a live worker of the job's queue declares its task."""

    deferred: bool
    delay_seconds: float
    waited_seconds: float
    declared: bool
    put_backs: int

    @property
    def buried(self) -> bool:
        return not self.deferred
