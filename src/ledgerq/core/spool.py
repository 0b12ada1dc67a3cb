"""The enqueue spool: where a producer keeps jobs it could not commit while the database was
unreachable (``LEDGERQ_SPOOL``), and the one replay that moves them into the ledger.

Invariants: every spooled job carries a key (an idempotency key, or the caller's own dedupe
key) from before its first insert attempt, so it is created at most once however often it is
inserted (a commit whose answer was lost with the connection, a second replay after a crash
between commit and removal, two drainers racing); an entry leaves the spool only after the
transaction that inserted its jobs committed; a producer's entries replay in write order.
The adapters (``transport/redis_spool.py``, ``transport/file_spool.py``) keep entries as
opaque text; this module spells an entry (``encode_entry`` / ``decode_entry``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Protocol

from ledgerq.core import errors
from ledgerq.core.job import EnqueueResult, JobHint, NewJob, as_utc, check_queue_name
from ledgerq.core.ports import JobStore
from ledgerq.core.states import JobState

#: Format of an entry; a replay refuses entries of another (newer) version.
ENTRY_VERSION = 1
#: How long a spool-generated dedupe key stays taken after its job's first commit: a replay
#: within it cannot create the job a second time, even once that job finished (see
#: docs/operations.md, "Enqueue spool").
KEY_WINDOW_SECONDS = 7 * 86400.0
#: Entries replayed in one transaction.
REPLAY_BATCH = 200
#: The prefix of the dedupe keys the spool generates.
KEY_PREFIX = "spool:"

Announce = Callable[[list[JobHint]], None]
StopCheck = Callable[[], bool]


class Spool(Protocol):
    """Durable, ordered storage of spooled entries, one sequence per producer."""

    def append(self, producer: str, entry: str) -> None:
        """Add ``entry`` at the end of ``producer``'s sequence; durable once this returns
        (as durable as the adapter's medium). Raise ``SpoolUnavailable`` if it cannot."""

    def producers(self) -> list[str]:
        """Producers that have (or recently had) entries."""

    def peek(self, producer: str, limit: int) -> list[str]:
        """Up to ``limit`` of ``producer``'s oldest entries, oldest first."""

    def remove(self, producer: str, count: int) -> None:
        """Drop ``producer``'s ``count`` oldest entries (after their commit)."""

    def size(self, producer: str) -> int:
        """How many entries ``producer`` has."""

    def hold(self, producer: str) -> AbstractContextManager[bool]:
        """Try to become ``producer``'s only drainer for the block; yields whether it did
        (never waits). Keeps a producer's order when several workers drain."""

    def close(self) -> None:
        """Release what the spool holds (not a borrowed client)."""


@dataclass(frozen=True, slots=True)
class SpoolCount:
    """Entries and jobs waiting in the spool for one producer."""

    producer: str
    entries: int
    jobs: int


def key_jobs(jobs: Sequence[NewJob], producer: str, serial: Callable[[], int]) -> list[NewJob]:
    """``jobs`` with a key each, so any insert of them creates each at most once: a job
    without a ``dedupe_key`` gets the idempotency key ``spool:<producer>:<n>``, held for
    ``KEY_WINDOW_SECONDS``; a caller's own ``dedupe_key`` keeps its own meaning (see
    docs/operations.md)."""
    keyed = []
    for job in jobs:
        if job.dedupe_key is None:
            data = asdict(job)
            data["idempotency_key"] = f"{KEY_PREFIX}{producer}:{serial()}"
            data["idempotency_for_seconds"] = KEY_WINDOW_SECONDS
            job = NewJob(**data)
        keyed.append(job)
    return keyed


def encode_entry(jobs: Sequence[NewJob]) -> str:
    """One entry (the jobs of one enqueue call) as JSON text."""
    return json.dumps(
        {"v": ENTRY_VERSION, "jobs": [_job_dict(job) for job in jobs]}, separators=(",", ":")
    )


def decode_entry(text: str) -> list[NewJob]:
    """The jobs of an entry; ``SpoolCorrupt`` if it is not one this version wrote."""
    try:
        data = json.loads(text)
        if data.get("v") != ENTRY_VERSION:
            raise ValueError(f"entry version {data.get('v')!r}, expected {ENTRY_VERSION}")
        return [_job_from(item) for item in data["jobs"]]
    except (ValueError, TypeError, KeyError, AttributeError, errors.InvalidJob) as exc:
        raise errors.SpoolCorrupt(f"unreadable spool entry: {exc}") from None


def _job_dict(job: NewJob) -> dict[str, object]:
    data = asdict(job)
    for name in ("run_at", "expires_at"):
        if data[name] is not None:
            data[name] = data[name].isoformat()
    return data


#: Each field of an entry's job and the types it may hold (anything else: ``SpoolCorrupt``).
_FIELDS: dict[str, tuple[type, ...]] = {
    "task": (str,),
    "queue": (str,),
    "args_json": (str,),
    "priority": (int,),
    "max_attempts": (int,),
    "delay_seconds": (int, float),
    "run_at": (str, type(None)),
    "dedupe_key": (str, type(None)),
    "timeout_seconds": (int, float, type(None)),
    "held": (bool,),
    "expires_at": (str, type(None)),
    "dedupe_for_seconds": (int, float, type(None)),
    "idempotency_key": (str, type(None)),
    "idempotency_for_seconds": (int, float, type(None)),
}


def _job_from(item: dict[str, object]) -> NewJob:
    # An entry is read back from a medium others may write to (Redis): it is checked as
    # strictly as a producer's request, so a forged one cannot bypass validation.
    if set(item) != set(_FIELDS):
        raise ValueError(f"job fields {sorted(item)}")
    for name, types in _FIELDS.items():
        if not isinstance(item[name], types) or (item[name] is True and bool not in types):
            raise ValueError(f"job field {name} is {type(item[name]).__name__}")
    data: dict[str, object] = dict(item)
    for name in ("run_at", "expires_at"):
        if data[name] is not None:
            data[name] = as_utc(datetime.fromisoformat(str(data[name])))
    check_queue_name(str(data["queue"]))
    args = json.loads(str(data["args_json"]))
    if not (isinstance(args, dict) and isinstance(args.get("args", []), list)):
        raise ValueError("job arguments are not an object of args and kwargs")
    return NewJob(**data)  # type: ignore[arg-type]


def replay(
    spool: Spool,
    store: JobStore,
    producer: str,
    *,
    announce: Announce | None = None,
    batch: int = REPLAY_BATCH,
    should_stop: StopCheck = lambda: False,
) -> Iterator[int]:
    """Move ``producer``'s entries into the ledger, oldest first, a batch of entries per
    transaction, each batch removed only after its commit; yield the jobs of each committed
    batch (created or found already created). The caller holds ``spool.hold(producer)``.
    A ``StoreUnavailable`` propagates and leaves the rest in the spool. ``announce`` gets the
    hints of the queued jobs each batch created."""
    while not should_stop():
        entries = spool.peek(producer, batch)
        if not entries:
            return
        jobs = [job for entry in entries for job in decode_entry(entry)]
        results = store.insert_jobs(jobs) if jobs else []
        spool.remove(producer, len(entries))
        if announce is not None:
            announce(created_hints(jobs, results))
        yield len(jobs)


def created_hints(jobs: Sequence[NewJob], results: Sequence[EnqueueResult]) -> list[JobHint]:
    """Hints for the queued jobs an insert created (not its duplicates)."""
    return [
        JobHint(result.job_id, job.queue, job.priority)
        for job, result in zip(jobs, results, strict=True)
        if not result.duplicate and job.initial_state is JobState.QUEUED
    ]
