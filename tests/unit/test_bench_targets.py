"""Issue 29's targets of ``ledgerq bench`` (targets.py): met, missed or not measured, by how
much, and the per-trial ratios; expected figures are computed from the rows the tests build.
The memory targets: test_bench_targets_memory.py."""

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

BULK = "bulk enqueue ≥ 1.2x pgqueuer"
DRAIN = "drain ≥ 1.2x pgqueuer (launch→last)"
LATENCY = "start latency p99 ≤ 3.0 ms (LISTEN/NOTIFY)"
IO_FIRST = "io 10 ms x16 ≥ 97% of 1,600 jobs/s (1st→last)"
IO_LAUNCH = "io 10 ms x16 ≥ 85% of 1,600 jobs/s (launch→last)"
REDIS_BULK = "bulk enqueue with Redis within 10% of without (≥ 0.9x)"
REDIS_PGQUEUER = "drain ≥ 1.6x pgqueuer (Redis, launch→last)"
REDIS_DRAMATIQ = "drain ≥ 2.5x dramatiq (Redis, launch→last)"
REDIS_P99 = "start latency p99 ≤ 2.0 ms (Redis)"
REDIS_P50 = "start latency p50 ≤ 1.0 ms (Redis)"
REDIS_SINGLE = "single enqueue ≥ 1.0x pgqueuer (Redis)"


def targets_of(rows: list[dict[str, Any]], ledgerq: str = LQ) -> dict[str, TargetResult]:
    """The targets about ``ledgerq``, by name."""
    return {t.name: t for t in Report.from_rows(rows).targets if t.ledgerq == ledgerq}


def met_rows(
    target: str, scale: float = 1.0, p50: float = 0.8, p99: float = 1.8
) -> list[dict[str, Any]]:
    """``full_rows`` with an io fast enough for both io targets (97.5% and 87.5%)."""
    rows = [r for r in full_rows(target, scale, p99, p50) if r["mode"] != "io"]
    return [*rows, row(target, "io", rate_from_launch=1400.0, rate_first_to_last=1560.0)]


def test_postgresql_targets_met_with_margins() -> None:
    found = targets_of(met_rows(LQ, p99=2.5) + full_rows("pgqueuer", scale=0.8))
    assert list(found) == [BULK, DRAIN, LATENCY, IO_FIRST, IO_LAUNCH]
    assert all(t.met for t in found.values())
    assert (found[BULK].value, found[BULK].threshold) == (pytest.approx(1.25), 1.2)
    assert found[BULK].margin == "1.25x (+4% vs 1.2x)"
    assert found[DRAIN].margin == "1.25x (+4% vs 1.2x)"
    assert found[DRAIN].detail == "drain no-op, 1st→last: 1.25x"
    assert (found[LATENCY].margin, found[LATENCY].detail) == (
        "2.5 ms (0.5 ms under)",
        "p50: 0.8 ms",
    )
    assert found[IO_FIRST].margin == "1,560 jobs/s = 97.5% (+0.5 points)"
    assert found[IO_FIRST].detail == "launch→last: 1,400 jobs/s = 87.5%"
    assert found[IO_LAUNCH].margin == "1,400 jobs/s = 87.5% (+2.5 points)"
    assert found[IO_LAUNCH].detail == "1st→last: 1,560 jobs/s = 97.5%"


def test_postgresql_targets_missed_with_margins() -> None:
    rows = full_rows(LQ, scale=0.5, p99=12.5) + full_rows("pgqueuer")
    found = targets_of(rows)
    assert not any(t.met for t in found.values())
    assert found[BULK].margin == "0.50x (-58% vs 1.2x)"
    assert found[DRAIN].margin == "0.50x (-58% vs 1.2x)"
    assert found[LATENCY].margin == "12.5 ms (9.5 ms over)"
    assert found[IO_FIRST].margin == "750 jobs/s = 46.9% (-50.1 points)"
    assert found[IO_LAUNCH].margin == "600 jobs/s = 37.5% (-47.5 points)"


def test_io_targets_at_their_thresholds_are_met_and_judged_apart() -> None:
    exact = [row(LQ, "io", rate_from_launch=1360.0, rate_first_to_last=1552.0)]
    assert [targets_of(exact)[n].met for n in (IO_FIRST, IO_LAUNCH)] == [True, True]
    steady_only = [row(LQ, "io", rate_from_launch=1359.0, rate_first_to_last=1600.0)]
    found = targets_of(steady_only)
    assert (found[IO_FIRST].met, found[IO_LAUNCH].met) == (True, False)
    assert found[IO_LAUNCH].margin == "1,359 jobs/s = 84.9% (-0.1 points)"


def test_latency_target_at_its_threshold_is_met() -> None:
    rows = [row(LQ, "latency", p50_ms=1.0, p99_ms=3.0, sent=2000, completed=2000)]
    assert targets_of(rows)[LATENCY].met is True


def test_ratio_targets_without_pgqueuer_are_not_measured() -> None:
    found = targets_of(full_rows(LQ))
    assert (found[DRAIN].met, found[BULK].met) == (None, None)
    assert found[BULK].margin == "not measured (needs ledgerq/postgresql and pgqueuer)"
    assert found[IO_FIRST].met is False  # judged on ledgerq's figures alone


def medians(drain: tuple[tuple[float, float], ...]) -> tuple[float, float]:
    return median(d[0] for d in drain), median(d[1] for d in drain)


def test_redis_targets_of_a_redis_only_run() -> None:
    found = targets_of(redis_only_rows(), REDIS)
    assert list(found) == [
        REDIS_BULK,
        REDIS_PGQUEUER,
        REDIS_DRAMATIQ,
        REDIS_P99,
        REDIS_P50,
        REDIS_SINGLE,
        IO_FIRST,
        IO_LAUNCH,
    ]
    ours, ours_first = medians(REDIS_DRAIN)

    pgq, pgq_first = medians(PGQUEUER_DRAIN)
    vs_pgq = found[REDIS_PGQUEUER]
    assert (vs_pgq.value, vs_pgq.threshold) == (pytest.approx(ours / pgq), 1.6)
    assert ours / pgq == pytest.approx(1.25)
    assert vs_pgq.met is False
    assert vs_pgq.margin == "1.25x (-22% vs 1.6x)"
    per_trial = [a[0] / b[0] for a, b in zip(REDIS_DRAIN, PGQUEUER_DRAIN, strict=True)]
    assert per_trial == pytest.approx([4000 / 3000, 1.25, 1.25])
    assert vs_pgq.detail == (
        f"drain no-op, 1st→last: {ours_first / pgq_first:.2f}x; trials: 1.33x, 1.25x, 1.25x"
    )
    assert ours_first / pgq_first == pytest.approx(1.35)

    dramatiq = medians(DRAMATIQ_DRAIN)[0]
    vs_dramatiq = found[REDIS_DRAMATIQ]
    assert (vs_dramatiq.value, vs_dramatiq.threshold) == (pytest.approx(ours / dramatiq), 2.5)
    assert ours / dramatiq == pytest.approx(1.8)
    assert vs_dramatiq.met is False
    assert vs_dramatiq.margin == "1.80x (-28% vs 2.5x)"
    assert vs_dramatiq.detail == "drain no-op, 1st→last: 2.00x; trials: 1.60x, 2.25x, 1.92x"

    p99, p50 = found[REDIS_P99], found[REDIS_P50]
    assert p99.value == median(p99 for _, p99 in REDIS_LATENCY_MS) == 4.5
    assert (p99.met, p99.threshold, p99.margin) == (False, 2.0, "4.5 ms (2.5 ms over)")
    assert p99.detail == "p50: 2.5 ms"
    assert (p50.met, p50.threshold, p50.margin) == (False, 1.0, "2.5 ms (1.5 ms over)")
    assert p50.detail == "p99: 4.5 ms"

    for name in (REDIS_BULK, REDIS_SINGLE, IO_FIRST, IO_LAUNCH):
        assert found[name].met is None
    assert found[REDIS_BULK].margin == (
        "not measured (needs ledgerq/postgresql_redis and ledgerq/postgresql)"
    )


def test_redis_latency_is_two_targets_so_the_missed_one_is_named() -> None:
    rows = trial_rows(REDIS, REDIS_DRAIN, ((1.3, 1.5), (1.5, 1.9), (1.0, 2.5)))
    found = targets_of(rows, REDIS)
    assert (found[REDIS_P99].met, found[REDIS_P99].margin) == (True, "1.9 ms (0.1 ms under)")
    assert (found[REDIS_P50].met, found[REDIS_P50].value) == (False, 1.3)
    assert found[REDIS_P50].margin == "1.3 ms (0.3 ms over)"
    exact = trial_rows(REDIS, (), ((1.0, 2.0),))
    assert [targets_of(exact, REDIS)[n].met for n in (REDIS_P99, REDIS_P50)] == [True, True]


@pytest.mark.parametrize(
    ("redis_bulk", "met", "margin"),
    [
        (46_000.0, True, "0.92x (+2% vs 0.9x)"),
        (45_000.0, True, "0.90x (+0% vs 0.9x)"),
        (44_000.0, False, "0.88x (-2% vs 0.9x)"),
    ],
)
def test_redis_bulk_is_judged_against_bulk_without_redis(
    redis_bulk: float, met: bool, margin: str
) -> None:
    rows = [row(LQ, "enqueue_bulk", rate=50_000.0), row(REDIS, "enqueue_bulk", rate=redis_bulk)]
    rows.append(row("pgqueuer", "enqueue_bulk", rate=10_000.0))  # plays no part
    found = targets_of(rows, REDIS)[REDIS_BULK]
    assert (found.met, found.margin, found.threshold) == (met, margin, 0.9)


def test_redis_single_enqueue_against_pgqueuer() -> None:
    rows = full_rows(REDIS, scale=0.95) + full_rows("pgqueuer") + full_rows(LQ, scale=2.0)
    single = targets_of(rows, REDIS)[REDIS_SINGLE]
    assert (single.met, single.value, single.threshold) == (False, pytest.approx(0.95), 1.0)
    assert (single.margin, single.detail) == ("0.95x (-5%)", "")
    assert targets_of(met_rows(REDIS) + full_rows("pgqueuer"), REDIS)[REDIS_SINGLE].met is True


def test_io_is_judged_for_each_ledgerq_target_on_its_own_figures() -> None:
    rows = met_rows(REDIS) + full_rows(LQ)
    assert [t.met for t in targets_of(rows, REDIS).values() if t.name.startswith("io")] == [
        True,
        True,
    ]
    assert [t.met for t in targets_of(rows, LQ).values() if t.name.startswith("io")] == [
        False,
        False,
    ]


def test_a_redis_only_run_leaves_the_postgresql_targets_not_measured() -> None:
    found = targets_of(redis_only_rows(), LQ)
    assert list(found) == [BULK, DRAIN, LATENCY, IO_FIRST, IO_LAUNCH]
    assert all(t.met is None and t.value is None for t in found.values())
    assert found[DRAIN].margin == "not measured (needs ledgerq/postgresql and pgqueuer)"


def test_redis_targets_without_their_peers_are_not_measured() -> None:
    rows = trial_rows(REDIS, REDIS_DRAIN, REDIS_LATENCY_MS)
    rows += trial_rows("pgqueuer", PGQUEUER_DRAIN, PGQUEUER_LATENCY_MS)
    found = targets_of(rows, REDIS)
    assert found[REDIS_PGQUEUER].met is False
    missing = found[REDIS_DRAMATIQ]
    assert (missing.met, missing.value, missing.detail) == (None, None, "")
    assert missing.margin == "not measured (needs ledgerq/postgresql_redis and dramatiq)"
    assert targets_of(full_rows("dramatiq"), REDIS)[REDIS_P99].margin == "not measured"


def test_pinned_targets_are_shown_but_never_judged() -> None:
    rows = met_rows(LQ + "_pinned") + met_rows(REDIS + "_pinned") + full_rows("pgqueuer", 0.5)
    targets = Report.from_rows(rows).targets
    assert {t.ledgerq for t in targets}.isdisjoint({LQ + "_pinned", REDIS + "_pinned"})
    judged = [t for t in targets if t.ledgerq in (LQ, REDIS)]
    assert all(t.met is None for t in judged)


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
    rows = met_rows(LQ) + met_rows(REDIS, scale=1.6)
    rows += full_rows("pgqueuer", scale=0.8) + full_rows("dramatiq", scale=0.5)
    ours, redis = targets_of(rows, LQ), targets_of(rows, REDIS)
    assert all(t.met for t in [*ours.values(), *redis.values()])
    assert ours[DRAIN].margin == "1.25x (+4% vs 1.2x)"
    assert redis[REDIS_BULK].margin == "1.60x (+78% vs 0.9x)"
    assert redis[REDIS_PGQUEUER].value == pytest.approx(9600 / 4800)
    assert redis[REDIS_PGQUEUER].margin == "2.00x (+25% vs 1.6x)"
    assert redis[REDIS_PGQUEUER].detail == "drain no-op, 1st→last: 2.00x"  # one trial: no pairs
    assert redis[REDIS_DRAMATIQ].value == pytest.approx(9600 / 3000)
    assert redis[REDIS_DRAMATIQ].margin == "3.20x (+28% vs 2.5x)"
    assert redis[REDIS_P99].margin == "1.8 ms (0.2 ms under)"
    assert redis[REDIS_P50].margin == "0.8 ms (0.2 ms under)"
    assert redis[REDIS_SINGLE].margin == "2.00x (+100%)"


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
