"""The Waker contract, over every implementation (``WAKERS``): a job committed to one of its
queues wakes a waiting fetcher early, nothing else does, and a rested waker listens again at
its next ``wait``."""

from __future__ import annotations

import time

from tests.contract.conftest import Wakeable


def test_a_wait_with_nothing_new_times_out_false(wakeable: Wakeable) -> None:
    began = time.monotonic()
    assert wakeable.waker.wait(0.3) is False
    assert time.monotonic() - began >= 0.3


def test_a_job_in_its_queue_wakes_a_wait_early(wakeable: Wakeable) -> None:
    wakeable.enqueue(wakeable.queue)
    began = time.monotonic()
    assert wakeable.waker.wait(30.0) is True
    assert time.monotonic() - began < 5.0
    assert wakeable.waker.wait(0.2) is False  # one wake-up per signal, consumed


def test_a_job_of_another_queue_does_not_wake_it(wakeable: Wakeable) -> None:
    wakeable.enqueue(f"{wakeable.queue}-other")
    assert wakeable.waker.wait(0.5) is False


def test_a_rested_waker_listens_again_at_its_next_wait(wakeable: Wakeable) -> None:
    wakeable.waker.rest()
    # What was committed while it rested sent it no signal: the next wait says "look again".
    assert wakeable.waker.wait(30.0) is True
    assert wakeable.waker.wait(0.2) is False
    wakeable.enqueue(wakeable.queue)
    assert wakeable.waker.wait(10.0) is True
