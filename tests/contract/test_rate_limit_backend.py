"""The RateLimitBackend contract, over every backend (``RATE_BACKENDS``: each database and
Redis). Two clients of one backend stand for two processes sharing the limits."""

from __future__ import annotations

import threading
import time

from ledgerq.core import limits as lim
from ledgerq.core.ports import RateLimitBackend
from tests.contract.conftest import RateBackends


def test_a_window_is_shared_by_clients_and_names_are_independent(
    rate_backends: RateBackends,
) -> None:
    """5 per 5 s with a burst of 5, shared by two clients: five go at once, the 6th is
    denied for up to one interval (1 s), then admitted."""
    first, second = rate_backends.first, rate_backends.second
    rate = lim.Rate(5, 5.0, burst=5)
    allowed = [
        (first if i % 2 else second).acquire_rate(name="rate:t", rate=rate) for i in range(5)
    ]
    assert all(d.allowed for d in allowed)
    denied = first.acquire_rate(name="rate:t", rate=rate)
    assert not denied.allowed and 0 < denied.retry_after_seconds <= 1.0
    assert second.acquire_rate(name="rate:other", rate=rate).allowed
    time.sleep(denied.retry_after_seconds + 0.05)
    assert second.acquire_rate(name="rate:t", rate=rate).allowed


def test_without_a_burst_admissions_are_spaced_and_denials_not_counted(
    rate_backends: RateBackends,
) -> None:
    rate = lim.Rate(2, 1.0)  # one admission per 0.5 s
    assert rate_backends.first.acquire_rate(name="rate:spaced", rate=rate).allowed
    denied = rate_backends.second.acquire_rate(name="rate:spaced", rate=rate)
    assert not denied.allowed and 0 < denied.retry_after_seconds <= 0.5
    # Denials count for nothing: after many, the first one's wait still holds.
    for _ in range(5):
        assert not rate_backends.first.acquire_rate(name="rate:spaced", rate=rate).allowed
    time.sleep(denied.retry_after_seconds + 0.05)
    assert rate_backends.second.acquire_rate(name="rate:spaced", rate=rate).allowed


def hammer(limiters: list[RateLimitBackend], rate: lim.Rate, enough: int) -> list[float]:
    """Threads over ``limiters`` ask as fast as they can until ``enough`` were admitted (or a
    generous deadline passed: a stalled backend then shows as too few); return the times."""
    admitted: list[float] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 30

    def ask(limiter: RateLimitBackend) -> None:
        while time.monotonic() < deadline:
            if limiter.acquire_rate(name="rate:hot", rate=rate).allowed:
                with lock:
                    admitted.append(time.monotonic())
            with lock:
                if len(admitted) >= enough:
                    return

    threads = [threading.Thread(target=ask, args=(one,)) for one in limiters * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(admitted)


def max_in_window(times: list[float], window: float) -> int:
    best, start = 0, 0
    for end, moment in enumerate(times):
        while moment - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best


def test_the_limit_holds_under_contention(rate_backends: RateBackends) -> None:
    rate = rate_backends.hot_rate  # N per 0.5 s
    enough = 2 * rate.limit + 1
    admitted = hammer([rate_backends.first, rate_backends.second], rate, enough=enough)
    # The window renews: 2N + 1 admissions need three windows of 0.5 s, so they span at
    # least 1 s. The times are taken by the client after each answer, so a loaded machine
    # blurs them: the bounds leave room for that, and a limiter that did not hold would break
    # them by far.
    assert len(admitted) >= enough
    assert admitted[-1] - admitted[0] >= 0.7
    assert max_in_window(admitted, 0.3) <= rate.limit
