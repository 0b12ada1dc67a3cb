"""The wait loop without a database: what a stored job turns into (value, JobFailed,
WaitTimeout), the handle's equality with EnqueueResult, and the finished-ids payload."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ledgerq import EnqueueResult, Job, JobFailed, JobHandle, JobState, WaitTimeout
from ledgerq.core.codec import PayloadCodec
from ledgerq.producer.job_handle import wait_for_job
from ledgerq.store.postgres.finish_listener import _ids


class OneJob:
    """A store holding one job whose state moves along ``states`` read by read."""

    def __init__(self, *states: JobState, result: str | None = None, error: str | None = None):
        self.states = list(states)
        self.result, self.error, self.reads = result, error, 0

    def get_job(self, job_id: int) -> Job:
        state = self.states[min(self.reads, len(self.states) - 1)]
        self.reads += 1
        now = datetime.now(UTC)
        return Job(
            id=job_id, task="t", queue="q", state=state, args_json="{}", priority=0,
            attempt=1, max_attempts=1, run_at=now, created_at=now,
            result_json=self.result, error_json=self.error,
        )  # fmt: skip


def test_the_wait_follows_the_job_to_its_end() -> None:
    codec = PayloadCodec()
    store = OneJob(JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED, result='{"a":[1]}')
    assert wait_for_job(store, codec, 7, 5.0) == {"a": [1]}  # type: ignore[arg-type]
    assert store.reads == 3

    error = json.dumps({"kind": "exception", "type": "KeyError", "message": "KeyError: 'x'"})
    with pytest.raises(JobFailed) as failed:
        wait_for_job(OneJob(JobState.FAILED, JobState.DEAD, error=error), codec, 7, 5.0)  # type: ignore[arg-type]
    assert (failed.value.state, failed.value.error_type) == ("dead", "KeyError")
    with pytest.raises(JobFailed, match="no error recorded"):
        wait_for_job(OneJob(JobState.CANCELLED), codec, 7, 5.0)  # type: ignore[arg-type]
    with pytest.raises(WaitTimeout, match=r"job 7 still running after waiting 0\.05 s"):
        wait_for_job(OneJob(JobState.RUNNING), codec, 7, 0.05)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        wait_for_job(OneJob(JobState.RUNNING), codec, 7, -1)  # type: ignore[arg-type]


def test_a_handle_is_an_enqueue_result_that_can_wait() -> None:
    handle = JobHandle(EnqueueResult(3, duplicate=True), waiter=None)  # type: ignore[arg-type]
    assert handle == EnqueueResult(3, duplicate=True) and EnqueueResult(3, True) == handle
    assert handle != EnqueueResult(3) and isinstance(handle, EnqueueResult)
    assert len({handle, JobHandle(EnqueueResult(3, True), None)}) == 1  # type: ignore[arg-type]


def test_the_finished_payload_names_its_schemas_ids_or_everyone() -> None:
    assert _ids("public:22", "public") == {22}
    assert _ids("tenant_b:22", "public") == set()  # another ledger's job in the database
    assert _ids("public:x", "public") is None  # unreadable: every waiter re-reads
    assert _ids("garbage", "public") is None
