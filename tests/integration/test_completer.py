"""The completer writes finished attempts in groups: outcomes that arrive within its linger
share one fenced write, and a stop writes what is queued at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest

from ledgerq.core.errors import StoreUnavailable
from ledgerq.core.job import Claim, NewJob
from ledgerq.core.operations import StoreWriteFailed
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from ledgerq.runtime.completer import LINGER_SECONDS, Backlog, Completer
from ledgerq.store.engine import create_engine
from ledgerq.store.jobs import SqlJobStore
from tests.helpers import wait_until


class CountingStore(SqlJobStore):
    """The real store, counting its group writes."""

    writes: list[int]

    def complete_jobs(self, completions: Sequence[Completion]) -> list[bool]:
        self.writes.append(len(completions))
        return super().complete_jobs(completions)


@pytest.fixture
def store(database_url: str) -> Iterator[CountingStore]:
    ledger = CountingStore(create_engine(database_url))
    ledger.writes = []
    yield ledger
    ledger.engine.dispose()


def running(store: SqlJobStore, count: int) -> list[Claim]:
    store.insert_jobs([NewJob(task="t", queue="q", args_json="[]") for _ in range(count)])
    jobs = store.claim_jobs(queues=["q"], worker_id="w", limit=count, lease_seconds=60)
    return [Claim(job.id, job.attempt) for job in jobs]


def test_outcomes_from_many_threads_share_few_writes_and_all_apply(store: CountingStore) -> None:
    claims = running(store, 80)
    written: list[tuple[Completion, bool]] = []
    completer = Completer(store, written.extend)
    completer.start()
    start = threading.Barrier(8)

    def finish(part: list[Claim]) -> None:
        start.wait()
        for claim in part:
            completer.add(Completion(claim, JobState.SUCCEEDED, result_json="1"))

    threads = [threading.Thread(target=finish, args=(claims[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert completer.flush(10)
    completer.stop()
    assert sorted(c.claim.job_id for c, ok in written if ok) == sorted(c.job_id for c in claims)
    assert sum(store.writes) == 80
    assert len(store.writes) <= 4, f"80 outcomes added at once took {store.writes} writes"
    assert store.count_jobs() == {("q", JobState.SUCCEEDED): 80}


def test_a_stop_writes_what_is_queued_without_waiting_out_the_linger(
    store: CountingStore,
) -> None:
    (claim,) = running(store, 1)
    completer = Completer(store, lambda written: None)
    completer.start()
    completer.add(Completion(claim, JobState.SUCCEEDED, result_json="1"))
    started = time.monotonic()
    completer.stop()
    assert store.writes == [1]
    assert store.get_job(claim.job_id).state is JobState.SUCCEEDED
    assert time.monotonic() - started < 5.0 + LINGER_SECONDS  # the join's own bound is 30 s


class FailingStore(SqlJobStore):
    """The real store, whose group writes fail ``failures`` times first (an outage), then
    block while ``gate`` is clear (a commit waiting for a standby that is gone)."""

    failures: int
    gate: threading.Event

    def complete_jobs(self, completions: Sequence[Completion]) -> list[bool]:
        if self.failures > 0:
            self.failures -= 1
            raise StoreUnavailable("database unavailable: injected")
        self.gate.wait(30)
        return super().complete_jobs(completions)


class Events:
    """An event sink that keeps what it is given."""

    def __init__(self) -> None:
        self.seen: list[object] = []

    def emit(self, event: object) -> None:
        self.seen.append(event)


def test_every_failed_write_is_counted_and_a_hung_write_shows_in_the_backlog(
    database_url: str,
) -> None:
    store = FailingStore(create_engine(database_url))
    store.failures, store.gate = 3, threading.Event()
    events = Events()
    written: list[tuple[Completion, bool]] = []
    completer = Completer(store, written.extend, events=events)  # type: ignore[arg-type]
    completer.start()
    try:
        claims = running(store, 2)
        assert completer.backlog() == Backlog(0, 0.0)
        for claim in claims:
            completer.add(Completion(claim, JobState.SUCCEEDED, result_json="1"))
        # Three failures, each one counted; then the write hangs and the backlog ages.
        wait_until(lambda: len(events.seen) == 3, timeout=10, what="three failures counted")
        assert events.seen == [StoreWriteFailed("completion")] * 3
        wait_until(lambda: completer.backlog().oldest_seconds > 0.5, what="the backlog aging")
        assert completer.backlog().pending == 2
        assert not written
        store.gate.set()
        assert completer.flush(10)
        assert completer.backlog() == Backlog(0, 0.0)
        assert [ok for _, ok in written] == [True, True]
    finally:
        store.gate.set()
        completer.stop()
        store.engine.dispose()
