"""The issue's targets of ``ledgerq bench`` (targets.py): met, missed or not measured, by how
much, and the per-trial ratios; expected figures are computed from the rows the tests build."""

from __future__ import annotations

from statistics import median
from typing import Any

import pytest

from ledgerq.benchmark.bench_report import Report
from ledgerq.benchmark.targets import TargetResult
from tests.unit.test_bench_report import (
    DRAMATIQ_DRAIN,
    LQ,
    PGQUEUER_DRAIN,
    PGQUEUER_LATENCY_MS,
    REDIS,
    REDIS_DRAIN,
    REDIS_LATENCY_MS,
    full_rows,
    redis_only_rows,
    row,
    trial_rows,
)

DRAIN = "drain ≥ 1.0x pgqueuer (launch→last)"
BULK = "bulk enqueue ≥ 1.0x pgqueuer"
IO = "io 10 ms x16 ≥ 90% of 1,600 jobs/s (1st→last)"
LATENCY = "start latency p99 ≤ 10 ms (LISTEN/NOTIFY)"
REDIS_PGQUEUER = "drain ≥ 1.2x pgqueuer (Redis, launch→last)"
REDIS_DRAMATIQ = "drain ≥ 2.0x dramatiq (Redis, launch→last)"
REDIS_LATENCY = "start latency p99 ≤ 5 ms (Redis)"


def targets_of(rows: list[dict[str, Any]], ledgerq: str = LQ) -> dict[str, TargetResult]:
    """The targets about ``ledgerq``, by name."""
    return {t.name: t for t in Report.from_rows(rows).targets if t.ledgerq == ledgerq}


def test_targets_met_with_margins() -> None:
    found = targets_of(full_rows(LQ) + full_rows("pgqueuer", scale=0.8))
    assert all(t.met for t in found.values())
    assert found[DRAIN].margin == "1.25x (+25%)"
    assert found[DRAIN].detail == "drain no-op, 1st→last: 1.25x"
    assert found[IO].margin == "1,500 jobs/s = 93.8% (+3.8 points)"
    assert found[LATENCY].margin == "5.0 ms (5.0 ms under)"


def test_targets_missed_with_margins() -> None:
    rows = full_rows(LQ, scale=0.5, p99=12.5) + full_rows("pgqueuer")
    found = targets_of(rows)
    assert not any(t.met for t in found.values())
    assert found[BULK].margin == "0.50x (-50%)"
    assert found[IO].margin == "750 jobs/s = 46.9% (-43.1 points)"
    assert found[LATENCY].margin == "12.5 ms (2.5 ms over)"


def test_ratio_targets_without_pgqueuer_are_not_measured() -> None:
    found = targets_of(full_rows(LQ))
    assert found[DRAIN].met is None
    assert found[BULK].met is None
    assert found[IO].met is True


def test_io_target_at_exactly_90_percent_is_met() -> None:
    rows = [row(LQ, "io", rate_from_launch=1000.0, rate_first_to_last=1440.0)]
    assert targets_of(rows)[IO].met is True


def medians(drain: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    return median(d[0] for d in drain), median(d[1] for d in drain)


def test_redis_targets_of_a_redis_only_run() -> None:
    found = targets_of(redis_only_rows(), REDIS)
    assert list(found) == [REDIS_PGQUEUER, REDIS_DRAMATIQ, REDIS_LATENCY]
    ours, ours_first = medians(REDIS_DRAIN)

    pgq, pgq_first = medians(PGQUEUER_DRAIN)
    vs_pgq = found[REDIS_PGQUEUER]
    assert (vs_pgq.value, vs_pgq.threshold) == (pytest.approx(ours / pgq), 1.2)
    assert ours / pgq == pytest.approx(1.25)
    assert vs_pgq.met is True
    assert vs_pgq.margin == "1.25x (+4% vs 1.2x)"
    per_trial = [a[0] / b[0] for a, b in zip(REDIS_DRAIN, PGQUEUER_DRAIN, strict=True)]
    assert per_trial == pytest.approx([4000 / 3000, 1.25, 1.25])
    assert vs_pgq.detail == (
        f"drain no-op, 1st→last: {ours_first / pgq_first:.2f}x; trials: 1.33x, 1.25x, 1.25x"
    )
    assert ours_first / pgq_first == pytest.approx(1.35)

    dramatiq = medians(DRAMATIQ_DRAIN)[0]
    vs_dramatiq = found[REDIS_DRAMATIQ]
    assert (vs_dramatiq.value, vs_dramatiq.threshold) == (pytest.approx(ours / dramatiq), 2.0)
    assert ours / dramatiq == pytest.approx(1.8)
    assert vs_dramatiq.met is False
    assert vs_dramatiq.margin == "1.80x (-10% vs 2.0x)"
    assert vs_dramatiq.detail == "drain no-op, 1st→last: 2.00x; trials: 1.60x, 2.25x, 1.92x"

    latency = found[REDIS_LATENCY]
    assert latency.value == median(p99 for _, p99 in REDIS_LATENCY_MS) == 4.5
    assert (latency.met, latency.threshold) == (True, 5.0)
    assert latency.margin == "4.5 ms (0.5 ms under)"
    assert latency.detail == "p50: 2.5 ms"


def test_redis_latency_target_missed() -> None:
    rows = trial_rows(REDIS, REDIS_DRAIN, ((3.0, 5.5), (3.0, 6.5), (3.0, 5.0)))
    latency = targets_of(rows, REDIS)[REDIS_LATENCY]
    assert (latency.met, latency.value, latency.margin) == (False, 5.5, "5.5 ms (0.5 ms over)")


def test_a_redis_only_run_leaves_the_postgresql_targets_not_measured() -> None:
    found = targets_of(redis_only_rows(), LQ)
    assert list(found) == [DRAIN, BULK, IO, LATENCY]
    assert all(t.met is None and t.value is None for t in found.values())
    assert found[DRAIN].margin == "not measured (needs ledgerq/postgresql and pgqueuer)"


def test_redis_targets_without_their_peers_are_not_measured() -> None:
    rows = trial_rows(REDIS, REDIS_DRAIN, REDIS_LATENCY_MS)
    rows += trial_rows("pgqueuer", PGQUEUER_DRAIN, PGQUEUER_LATENCY_MS)
    found = targets_of(rows, REDIS)
    assert found[REDIS_PGQUEUER].met is True
    missing = found[REDIS_DRAMATIQ]
    assert (missing.met, missing.value, missing.detail) == (None, None, "")
    assert missing.margin == "not measured (needs ledgerq/postgresql_redis and dramatiq)"
    assert targets_of(full_rows("dramatiq"), REDIS)[REDIS_LATENCY].margin == "not measured"


def test_per_trial_ratios_only_when_both_sides_have_the_same_trials() -> None:
    rows = trial_rows(REDIS, REDIS_DRAIN, ()) + trial_rows("pgqueuer", PGQUEUER_DRAIN[:2], ())
    three_vs_two = targets_of(rows, REDIS)[REDIS_PGQUEUER]
    assert three_vs_two.value == pytest.approx(4500 / median([3000, 3600]))
    assert three_vs_two.detail == f"drain no-op, 1st→last: {5400 / median([3900, 4000]):.2f}x"

    rows = trial_rows(REDIS, REDIS_DRAIN[:2], ()) + trial_rows("pgqueuer", PGQUEUER_DRAIN[:2], ())
    rows += trial_rows("dramatiq", DRAMATIQ_DRAIN, ())
    rows.append(row(REDIS, "drain", 3, error="RuntimeError: boom"))
    rows[-3] = row("dramatiq", "drain", 2, error="RuntimeError: boom")
    found = targets_of(rows, REDIS)
    # ledgerq's trials 1 and 2 against pgqueuer's 1 and 2: paired.
    assert found[REDIS_PGQUEUER].detail.endswith("; trials: 1.33x, 1.25x")
    # ... against dramatiq's 1 and 3: as many, but not the same rounds, so not paired.
    vs_dramatiq = found[REDIS_DRAMATIQ]
    assert vs_dramatiq.value == pytest.approx(median([4000, 4500]) / median([2500, 2600]))
    assert "trials" not in vs_dramatiq.detail


def test_a_run_of_both_reports_both() -> None:
    rows = full_rows(LQ) + full_rows(REDIS, scale=1.6, p99=4.0)
    rows += full_rows("pgqueuer", scale=0.8) + full_rows("dramatiq", scale=0.5)
    ours, redis = targets_of(rows, LQ), targets_of(rows, REDIS)
    assert all(t.met for t in [*ours.values(), *redis.values()])
    assert ours[DRAIN].margin == "1.25x (+25%)"
    assert redis[REDIS_PGQUEUER].value == pytest.approx(9600 / 4800)
    assert redis[REDIS_PGQUEUER].margin == "2.00x (+67% vs 1.2x)"
    assert redis[REDIS_PGQUEUER].detail == "drain no-op, 1st→last: 2.00x"  # one trial: no pairs
    assert redis[REDIS_DRAMATIQ].value == pytest.approx(9600 / 3000)
    assert redis[REDIS_DRAMATIQ].margin == "3.20x (+60% vs 2.0x)"
    assert redis[REDIS_LATENCY].margin == "4.0 ms (1.0 ms under)"


OUTAGE = "drain during a Redis outage ≥ 0.5x with Redis (launch→last)"
REDIS_DOWN = "ledgerq_postgresql_redis_down"


def test_outage_target_is_the_drain_with_redis_down_over_the_drain_with_redis() -> None:
    down = ((2400.0, 2700.0), (2000.0, 2500.0), (2700.0, 3000.0))
    rows = trial_rows(REDIS, REDIS_DRAIN, ()) + trial_rows(REDIS_DOWN, down, ())
    outage = targets_of(rows, REDIS_DOWN)[OUTAGE]
    ours = medians(REDIS_DRAIN)
    assert outage.value == pytest.approx(2400 / ours[0])
    assert (outage.met, outage.threshold) == (True, 0.5)
    per_trial = [d[0] / r[0] for d, r in zip(down, REDIS_DRAIN, strict=True)]
    shown = ", ".join(f"{r:.2f}x" for r in per_trial)
    assert outage.detail == f"drain no-op, 1st→last: {2700 / ours[1]:.2f}x; trials: {shown}"
    assert (
        outage.margin == f"{2400 / ours[0]:.2f}x (+{(2400 / ours[0] / 0.5 - 1) * 100:.0f}% vs 0.5x)"
    )


def test_outage_target_missed_and_not_measured() -> None:
    slow = ((1000.0, 1200.0),)
    rows = trial_rows(REDIS, REDIS_DRAIN[:1], ()) + trial_rows(REDIS_DOWN, slow, ())
    missed = targets_of(rows, REDIS_DOWN)[OUTAGE]
    assert missed.met is False and missed.value == pytest.approx(1000 / REDIS_DRAIN[0][0])
    alone = targets_of(trial_rows(REDIS_DOWN, slow, ()), REDIS_DOWN)[OUTAGE]
    assert alone.met is None
    assert alone.margin == (
        "not measured (needs ledgerq/postgresql_redis_down and ledgerq/postgresql_redis)"
    )


SQLITE = "ledgerq_sqlite"
SQLITE_DRAIN = "drain ≥ 1.5x huey_sqlite (SQLite, launch→last)"
SQLITE_SINGLE = "single enqueue ≥ 1.0x huey_sqlite (SQLite)"


def test_sqlite_targets_judge_ledgerq_on_sqlite_against_huey_on_sqlite() -> None:
    rows = full_rows(SQLITE) + full_rows("huey_sqlite", scale=0.6) + full_rows(LQ, scale=0.1)
    found = targets_of(rows, SQLITE)
    assert list(found) == [SQLITE_DRAIN, SQLITE_SINGLE]
    drain, single = found[SQLITE_DRAIN], found[SQLITE_SINGLE]
    # 6,000 / 3,600 jobs/s: the PostgreSQL figures (a tenth) play no part.
    assert (drain.met, drain.value, drain.threshold) == (True, pytest.approx(1 / 0.6), 1.5)
    assert drain.margin == "1.67x (+11% vs 1.5x)"
    assert drain.detail == "drain no-op, 1st→last: 1.67x"
    assert (single.met, single.value, single.threshold) == (True, pytest.approx(1 / 0.6), 1.0)
    assert single.margin == "1.67x (+67%)"


def test_sqlite_targets_missed_by_how_much_and_not_measured() -> None:
    rows = full_rows(SQLITE, scale=0.7) + full_rows("huey_sqlite", scale=0.5)
    rows.append(row(SQLITE, "enqueue_single", 2, rate=450.0))
    rows.append(row("huey_sqlite", "enqueue_single", 2, rate=500.0))
    found = targets_of(rows, SQLITE)
    assert found[SQLITE_DRAIN].met is False
    assert found[SQLITE_DRAIN].margin == "1.40x (-7% vs 1.5x)"
    single = found[SQLITE_SINGLE]
    assert single.value == pytest.approx(median([700, 450]) / median([500, 500]))
    assert single.met is True
    assert single.detail == "trials: 1.40x, 0.90x"
    alone = targets_of(full_rows(SQLITE) + full_rows("huey"), SQLITE)
    assert all(t.met is None for t in alone.values())
    assert alone[SQLITE_DRAIN].margin == "not measured (needs ledgerq/sqlite and huey_sqlite)"
