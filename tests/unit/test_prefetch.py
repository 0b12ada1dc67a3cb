"""The prefetch room: fixed when given, else about 20 ms of work at the recent job duration,
between 1x and 2x the concurrency."""

from __future__ import annotations

from ledgerq.runtime.prefetch import AUTO_MAX_FACTOR, PrefetchRoom


def test_a_fixed_prefetch_never_moves() -> None:
    room = PrefetchRoom(concurrency=8, prefetch=3)
    for _ in range(100):
        room.observe(0.0001)
    assert room.capacity == 11
    assert PrefetchRoom(concurrency=4, prefetch=0).capacity == 4


def test_automatic_prefetch_grows_for_short_jobs_up_to_its_cap() -> None:
    room = PrefetchRoom(concurrency=8, prefetch=None)
    assert room.capacity == 16  # no duration seen yet: one prefetched job per slot
    for _ in range(200):
        room.observe(0.0005)  # 0.5 ms jobs: 20 ms of work is far more than the cap
    assert room.capacity == 8 + AUTO_MAX_FACTOR * 8


def test_automatic_prefetch_stays_at_the_concurrency_for_long_jobs() -> None:
    room = PrefetchRoom(concurrency=8, prefetch=None)
    for _ in range(200):
        room.observe(0.0005)
    for _ in range(200):
        room.observe(1.0)  # the jobs became long: back to the fair minimum
    assert room.capacity == 16


def test_automatic_prefetch_holds_about_20_ms_of_work_in_between() -> None:
    room = PrefetchRoom(concurrency=4, prefetch=None)
    for _ in range(500):
        room.observe(0.004)  # 4 slots x 20 ms / 4 ms = 20 jobs, capped at 2 x 4 = 8
    assert room.capacity == 4 + 8
    room = PrefetchRoom(concurrency=10, prefetch=None)
    for _ in range(500):
        room.observe(0.015)  # 10 x 20 / 15 = 13 jobs: between the bounds
    assert room.capacity == 10 + 13
