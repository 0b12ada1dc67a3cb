"""The batch hook: decides a batch's callbacks under the batch row's lock in the caller's
transaction, so each fires at most once. Its ``*_fired_at`` is set in the transaction that
enqueues it, and a racing member's transaction waits for the lock and then sees the first
one's outcome (READ COMMITTED reads anew after the wait)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ledgerq.core.batches import BatchEvent, Callback, due_events
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.job import JobHint, NewJob
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.core.workflow import WorkflowCommit
from ledgerq.store.completion_hooks import CompletionHook
from ledgerq.store.dialects import Dialect
from ledgerq.store.job_rows import job_values
from ledgerq.store.tables import batches, jobs

S = JobState
FIRED = {event: batches.c[f"{event.value}_fired_at"] for event in BatchEvent}
_codec = PayloadCodec()


def callbacks_json(callbacks: Mapping[BatchEvent, Callback]) -> str:
    """The ``batches.callbacks`` column of ``callbacks``."""
    return json.dumps(
        {
            event.value: {
                "task": cb.task,
                "queue": cb.queue,
                "priority": cb.priority,
                "max_attempts": cb.max_attempts,
                "timeout_seconds": cb.timeout_seconds,
            }
            for event, cb in callbacks.items()
        }
    )


def callbacks_of(text: str) -> dict[BatchEvent, Callback]:
    """Inverse of ``callbacks_json``."""
    return {BatchEvent(event): Callback(**spec) for event, spec in json.loads(text).items()}


def member_counts(conn: Connection, batch_id: int) -> dict[JobState, int]:
    """Members of the batch per state."""
    stmt = (
        sa.select(jobs.c.state, sa.func.count())
        .where(jobs.c.batch_id == batch_id)
        .group_by(jobs.c.state)
    )
    rows: Sequence[Any] = conn.execute(stmt).all()
    return {S(state): int(n) for state, n in rows}


def advance_batches(
    conn: Connection,
    dialect: Dialect,
    batch_ids: Iterable[int],
    hints: list[JobHint] | None = None,
) -> int:
    """Fire the due callbacks of these batches inside ``conn``'s transaction; return how many
    events fired, and add the callback jobs to ``hints`` (to announce once committed). Batch
    rows are locked in id order, so concurrent callers cannot deadlock."""
    fired_count = 0
    queues: set[str] = set()
    for batch_id in sorted(set(batch_ids)):
        row = (
            conn.execute(sa.select(*batches.c).where(batches.c.id == batch_id).with_for_update())
            .mappings()
            .first()
        )
        if row is None:
            continue
        fired = {event for event, column in FIRED.items() if row[column.name] is not None}
        due = due_events(int(row["size"]), member_counts(conn, batch_id), fired)
        if not due:
            continue
        callbacks = callbacks_of(row["callbacks"])
        for event in due:
            callback = callbacks.get(event)
            if callback is not None:
                values = job_values(dialect, _callback_job(callback, batch_id))
                inserted = conn.execute(sa.insert(jobs).values(values)).inserted_primary_key
                queues.add(callback.queue)
                if hints is not None and inserted is not None:
                    hints.append(JobHint(int(inserted[0]), callback.queue, callback.priority))
        conn.execute(
            sa.update(batches)
            .where(batches.c.id == batch_id)
            .values({FIRED[event].name: dialect.now() for event in due})
        )
        fired_count += len(due)
    if queues:
        dialect.notify(conn, queues)
    return fired_count


def _fire_callbacks(
    conn: Connection, dialect: Dialect, completions: Sequence[Completion], _applied: Sequence[bool]
) -> WorkflowCommit:
    """Fire the due callbacks of the completions' batches; their jobs are to announce."""
    commit = WorkflowCommit()
    batch_ids = {c.batch_id for c in completions if c.batch_id is not None}
    advance_batches(conn, dialect, batch_ids, commit.hints)
    return commit


#: Batches as a completion hook of the job store.
HOOK = CompletionHook("batches", attrgetter("batch_id"), _fire_callbacks, row_by_row=True)


def advance_open(conn: Connection, dialect: Dialect, *, limit: int) -> int:
    """``advance_batches`` for up to ``limit`` batches whose completion has not fired: the
    reconciler's backstop for members that died by failover or were cancelled, outcomes the
    completion path does not write."""
    ids: Sequence[Any] = (
        conn.execute(
            sa.select(batches.c.id)
            .where(batches.c.complete_fired_at.is_(None))
            .order_by(batches.c.id)
            .limit(limit)
        )
        .scalars()
        .all()
    )
    return advance_batches(conn, dialect, [int(i) for i in ids])


def _callback_job(callback: Callback, batch_id: int) -> NewJob:
    return NewJob(
        task=callback.task,
        queue=callback.queue,
        args_json=_codec.encode_args((), {"batch_id": batch_id}),
        priority=callback.priority,
        max_attempts=callback.max_attempts,
        timeout_seconds=callback.timeout_seconds,
    )
