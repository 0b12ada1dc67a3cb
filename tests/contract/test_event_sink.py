"""The EventSink contract, over every implementation (``EVENT_SINKS``): every kind of event
is taken, edge values included, without raising."""

from __future__ import annotations

from ledgerq.core.operations import (
    CompletionBacklog,
    Event,
    EventSink,
    HealthChecked,
    HintsDropped,
    JobFinished,
    JobsEnqueued,
    ReconcilePassed,
    StoreWriteFailed,
    UnknownTaskSeen,
)

EVERY_KIND: list[Event] = [
    JobFinished("q", "t", "succeeded", 0.01),
    JobFinished("q", "t", "dead", 0.0),
    JobsEnqueued("q"),
    JobsEnqueued("q", count=0),
    ReconcilePassed((("announced", 3), ("stuck_requeued", 0))),
    ReconcilePassed(()),
    HintsDropped(0),
    StoreWriteFailed("completion"),
    CompletionBacklog(pending=0, oldest_seconds=0.0),
    UnknownTaskSeen("q", "new.task", "deferred"),
    HealthChecked(ok=True),
    HealthChecked(ok=False),
]


def test_every_kind_of_event_is_taken_without_raising(event_sink: EventSink) -> None:
    for event in EVERY_KIND:
        event_sink.emit(event)
