"""Pacer: a worker ahead of its peers' mean rate slows its claims; otherwise it never waits."""

from __future__ import annotations

import pytest

from ledgerq.runtime import pacer as pacer_module
from ledgerq.runtime.pacer import MAX_DELAY_SECONDS, Pacer


def test_delay_follows_the_lead_and_ends_with_it() -> None:
    pacer = Pacer(window_seconds=10)
    delays = []
    for rate in (103.0, 110.0, 150.0, 1000.0):
        pacer.rate = rate
        delays.append(pacer.adjust(100.0))
    assert delays[0] > 0 and delays == sorted(delays) and delays[-1] == MAX_DELAY_SECONDS
    pacer.rate = 101.0  # within the tolerance: no brake at all
    assert pacer.adjust(100.0) == 0.0


def test_alone_or_idle_peers_never_slow_a_worker() -> None:
    pacer = Pacer(window_seconds=10)
    pacer.rate = 500.0
    assert pacer.adjust(None) == 0.0
    assert pacer.adjust(0.0) == 0.0


def test_rate_is_measured_over_the_window() -> None:
    pacer = Pacer(window_seconds=10)
    pacer.sample(0)
    assert pacer.sample(0) == 0.0
    assert pacer.sample(50) > 0


def test_rate_counts_from_the_start_of_the_backlog(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(pacer_module.time, "monotonic", lambda: clock[0])
    pacer = Pacer(window_seconds=60)
    pacer.sample(500)  # an earlier backlog's jobs, then idle until 110
    clock[0] = 112.0
    assert pacer.sample(700, backlog_since=110.0) == 100.0  # 200 jobs in the 2 s since 110
    clock[0] = 114.0
    assert pacer.sample(900, backlog_since=110.0) == 100.0  # a count, not a sliding rate
    assert pacer.sample(900) == 400 / 14  # no backlog: over the window


def test_brake_follows_the_count_between_heartbeats(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that surges after its heartbeat is braked at its next claim, not a heartbeat
    later: the claim-time delay uses the running total at that moment."""
    clock = [100.0]
    monkeypatch.setattr(pacer_module.time, "monotonic", lambda: clock[0])
    pacer = Pacer(window_seconds=60)
    pacer.sample(0)
    clock[0] = 110.0
    pacer.sample(1000, backlog_since=100.0)  # 100 jobs/s, like its peers
    assert pacer.adjust(100.0) == 0.0 and pacer.delay_now(1000) == 0.0
    clock[0] = 110.3
    surged = pacer.delay_now(1080)  # 80 more jobs since the heartbeat: 1080 / 10.3 s, 5 % ahead
    assert 0 < surged < MAX_DELAY_SECONDS
    assert surged < pacer.delay_now(1120) < MAX_DELAY_SECONDS  # the brake grows with the lead
    clock[0] = 111.0
    assert pacer.delay_now(1110) == 0.0  # back to 100/s: the brake ends with the lead


def test_no_peers_no_claim_time_brake() -> None:
    pacer = Pacer(window_seconds=10)
    pacer.sample(0)
    pacer.adjust(None)
    assert pacer.delay_now(10_000) == 0.0
