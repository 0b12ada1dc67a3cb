"""Job states and the allowed moves between them, kept as data with one check function."""

from __future__ import annotations

from enum import StrEnum

from ledgerq.core import errors


class JobState(StrEnum):
    """Where a job is in its life. ``failed`` means "failed, will retry"; ``dead`` is final."""

    HELD = "held"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"


S = JobState

#: Every allowed move. ``running -> queued`` is the put-back on shutdown or rescue;
#: ``running -> scheduled`` the postponement of a claim that ran nothing (a limit, an unknown
#: task). ``store/moves.py`` checks its moves against this table.
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.HELD: frozenset({S.QUEUED, S.CANCELLED}),
    S.SCHEDULED: frozenset({S.QUEUED, S.CANCELLED}),
    S.QUEUED: frozenset({S.RUNNING, S.CANCELLED}),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.DEAD, S.QUEUED, S.SCHEDULED, S.CANCELLED}),
    S.FAILED: frozenset({S.QUEUED, S.CANCELLED}),
    S.SUCCEEDED: frozenset(),
    S.DEAD: frozenset({S.QUEUED}),
    S.CANCELLED: frozenset({S.QUEUED}),
}

#: States a job is still on its way in: a dedupe key is unique among these.
UNFINISHED: frozenset[JobState] = frozenset({S.HELD, S.SCHEDULED, S.QUEUED, S.RUNNING, S.FAILED})
#: States a job never leaves on its own.
FINISHED: frozenset[JobState] = frozenset({S.SUCCEEDED, S.DEAD, S.CANCELLED})
#: States waiting for their run_at before they become ``queued``.
WAITING: frozenset[JobState] = frozenset({S.SCHEDULED, S.FAILED})


def sources_of(target: JobState) -> frozenset[JobState]:
    """Return every state from which ``target`` may be reached."""
    return frozenset(src for src, dests in TRANSITIONS.items() if target in dests)


def check_transition(source: JobState, target: JobState) -> None:
    """Raise ``InvalidTransition`` unless ``source -> target`` is allowed."""
    if target not in TRANSITIONS[source]:
        raise errors.InvalidTransition(f"a {source.value} job cannot become {target.value}")
