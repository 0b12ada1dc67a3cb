"""Issue 29 item 6 in ``ledgerq bench``'s targets (targets.py): worker RSS idle and busy beside
dramatiq's and celery's (shown, never judged) and no RSS growth over a drain (RSS at 100% ≤ RSS
at 10% x 1.05), each only when its memory mode ran."""

from __future__ import annotations

from typing import Any

from ledgerq.benchmark import bench_tables
from ledgerq.benchmark.bench_report import Report
from tests.unit.test_bench_report import LQ, REDIS, full_rows, render, row
from tests.unit.test_bench_targets import targets_of

MEMORY = "worker RSS idle / 8 slots busy, beside dramatiq and celery"
GROWTH = "no RSS growth over a drain (100% ≤ 10% x 1.05)"


def memory(target: str, idle: float, busy: float) -> dict[str, Any]:
    return row(target, "memory", idle_rss_mb=idle, busy_rss_mb=busy, worker_processes=2)


def drain_rss(target: str, at_10: float, at_100: float) -> dict[str, Any]:
    return row(target, "memory_drain", rss_10pct_mb=at_10, rss_100pct_mb=at_100)


def test_memory_is_shown_beside_dramatiq_and_celery_and_never_judged() -> None:
    rows = [memory(LQ, 61.25, 70.5), memory(REDIS, 64.0, 72.0)]
    rows += [memory("dramatiq", 40.0, 44.5), memory("celery", 90.0, 120.0)]
    for ledgerq, margin in ((LQ, "61.2 / 70.5 MB"), (REDIS, "64.0 / 72.0 MB")):
        shown = targets_of(rows, ledgerq)[MEMORY]
        assert (shown.met, shown.informational, shown.threshold) == (None, True, None)
        assert shown.margin == margin
        assert shown.detail == "dramatiq: 40.0 / 44.5 MB; celery: 90.0 / 120.0 MB"
        assert bench_tables.verdict(shown) == "measured"
    assert targets_of(rows, LQ)[MEMORY].value == 61.25


def test_memory_without_its_peers_or_without_ledgerq() -> None:
    alone = targets_of([memory(LQ, 60.0, 70.0)])[MEMORY]
    assert alone.detail == "dramatiq, celery: not run"
    peers_only = [memory("dramatiq", 40.0, 44.5), *full_rows(LQ)]
    missing = targets_of(peers_only)[MEMORY]
    assert (missing.met, missing.value, missing.margin) == (None, None, "not measured")
    assert bench_tables.verdict(missing) == "not measured"


def test_memory_targets_only_when_their_modes_ran() -> None:
    names = list(targets_of(full_rows(LQ) + full_rows(REDIS), LQ))
    assert MEMORY not in names and GROWTH not in names
    names = list(targets_of([*full_rows(LQ), memory(LQ, 60.0, 70.0)], LQ))
    assert names[-1] == MEMORY and GROWTH not in names


def test_no_growth_met_and_missed_by_how_much() -> None:
    rows = [drain_rss(LQ, 80.0, 82.0), drain_rss(REDIS, 80.0, 88.0)]
    rows += [drain_rss("dramatiq", 40.0, 41.5), drain_rss("celery", 90.0, 130.0)]
    met, missed = targets_of(rows, LQ)[GROWTH], targets_of(rows, REDIS)[GROWTH]
    assert (met.met, met.value, met.threshold) == (True, 82.0 / 80.0, 1.05)
    assert met.margin == "+2.0 MB = +2.5% (2.5 points under)"
    assert met.detail == "RSS 80.0 → 82.0 MB; dramatiq: +1.5 MB; celery: +40.0 MB"
    assert (missed.met, missed.margin) == (False, "+8.0 MB = +10.0% (5.0 points over)")
    edge = targets_of([drain_rss(LQ, 100.0, 105.0)])[GROWTH]
    assert (edge.met, edge.detail) == (True, "RSS 100.0 → 105.0 MB")
    shrank = targets_of([drain_rss(LQ, 100.0, 90.0)])[GROWTH]
    assert (shrank.met, shrank.margin) == (True, "-10.0 MB = -10.0% (15.0 points under)")


def test_no_growth_not_measured() -> None:
    rows = [drain_rss("dramatiq", 40.0, 41.5), row(LQ, "memory_drain", error="RuntimeError: x")]
    missing = targets_of(rows)[GROWTH]
    assert (missing.met, missing.value, missing.margin) == (None, None, "not measured")


def test_memory_rows_in_the_terminal_and_markdown_tables() -> None:
    rows = [*full_rows(LQ), memory(LQ, 60.0, 70.0), drain_rss(LQ, 80.0, 90.0)]
    report = Report.from_rows([*rows, memory("dramatiq", 40.0, 44.5)], {"trials": 1})
    text = render(bench_tables.targets_table(report))
    assert "measured" in text and "60.0 / 70.0 MB" in text and "MISSED" in text
    markdown = bench_tables.markdown(report)
    assert f"| {MEMORY} | measured | 60.0 / 70.0 MB | dramatiq: 40.0 / 44.5 MB |" in markdown
    assert f"| {GROWTH} | MISSED | +10.0 MB = +12.5% (7.5 points over) | RSS" in markdown
