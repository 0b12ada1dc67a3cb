"""The prefetch room: fixed when given, else about 20 ms of work at the recent job duration,
at most 4x the concurrency, and none for long jobs or before any duration is known."""

from __future__ import annotations

from ledgerq.runtime.prefetch import AUTO_MAX_FACTOR, LIMITED_HOLD_SECONDS, PrefetchRoom


def test_a_fixed_prefetch_never_moves() -> None:
    room = PrefetchRoom(concurrency=8, prefetch=3)
    for _ in range(100):
        room.observe(0.0001)
    assert room.capacity == 11
    assert PrefetchRoom(concurrency=4, prefetch=0).capacity == 4


def test_automatic_prefetch_grows_for_short_jobs_up_to_its_cap() -> None:
    room = PrefetchRoom(concurrency=8, prefetch=None)
    assert room.capacity == 8  # no duration seen yet: nothing claimed ahead
    for _ in range(200):
        room.observe(0.0005)  # 0.5 ms jobs: 20 ms of work is far more than the cap
    assert room.capacity == 8 + AUTO_MAX_FACTOR * 8


def test_automatic_prefetch_is_zero_for_long_jobs() -> None:
    room = PrefetchRoom(concurrency=8, prefetch=None)
    for _ in range(200):
        room.observe(0.0005)
    for _ in range(200):
        room.observe(1.0)  # the jobs became long: nothing is held that another worker could run
    assert room.capacity == 8


def test_automatic_prefetch_holds_about_20_ms_of_work_in_between() -> None:
    room = PrefetchRoom(concurrency=4, prefetch=None)
    for _ in range(500):
        room.observe(0.002)  # 4 slots x 20 ms / 2 ms = 40 jobs, capped at 4 x 4 = 16
    assert room.capacity == 4 + 16
    room = PrefetchRoom(concurrency=10, prefetch=None)
    for _ in range(500):
        room.observe(0.015)  # 10 x 20 / 15 = 13 jobs: between the bounds
    assert room.capacity == 10 + 13


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_limited_job_holds_the_automatic_prefetch_at_its_floor_for_a_while() -> None:
    clock = FakeClock()
    room = PrefetchRoom(concurrency=4, prefetch=None, clock=clock)
    for _ in range(200):
        room.observe(0.0005)
    assert room.capacity == 4 + AUTO_MAX_FACTOR * 4
    room.observe_limited()  # e.g. a rate-limited job: short handler, but it waits to start
    assert room.capacity == 4
    clock.now += LIMITED_HOLD_SECONDS - 0.1
    for _ in range(200):
        room.observe(0.0005)  # short unlimited jobs do not lift the floor before it expires
    assert room.capacity == 4
    clock.now += 0.2
    room.observe(0.0005)
    assert room.capacity == 4 + AUTO_MAX_FACTOR * 4


def test_a_fixed_prefetch_ignores_limited_jobs() -> None:
    room = PrefetchRoom(concurrency=4, prefetch=12)
    room.observe_limited()
    assert room.capacity == 16
