"""The issue's targets of ``ledgerq bench``, met or missed and by how much: four for ledgerq on
PostgreSQL (polling, LISTEN/NOTIFY), four for its Redis transport, two for ledgerq on SQLite
against huey on SQLite (issue 29 item 7). Pure, like report.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ledgerq.benchmark.bench_cells import (
    METRIC_BY_KEY,
    REFERENCE,
    Cell,
    display_name,
    ratio,
    trial_ratios,
)

#: ledgerq on PostgreSQL with the Redis transport: the subject of the Redis targets.
REDIS = "ledgerq_postgresql_redis"
#: The same while Redis is unreachable (workers poll the ledger): the outage target.
REDIS_DOWN = "ledgerq_postgresql_redis_down"
#: ledgerq on SQLite, the embedded default: the subject of the SQLite targets.
SQLITE = "ledgerq_sqlite"
#: huey with its SqliteStorage (benchmark/peers_extra/bench_huey_sqlite.py): SQLite's peer.
HUEY_SQLITE = "huey_sqlite"
#: Theoretical ceiling of the io workload: 16 slots / 10 ms, in jobs/s.
IO_CEILING = 1600.0


@dataclass(frozen=True, slots=True)
class TargetResult:
    """One of the issue's targets for the ledgerq target ``ledgerq``: whether it is met (None:
    not measured) and by how much."""

    name: str
    ledgerq: str
    met: bool | None
    value: float | None
    threshold: float
    margin: str
    detail: str = ""

    def as_json(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {
            "name": self.name,
            "ledgerq": self.ledgerq,
            "met": self.met,
            "value": self.value,
            "threshold": self.threshold,
            "margin": self.margin,
            "detail": self.detail,
        }


def _cell(summary: Mapping[str, Mapping[str, Cell]], target: str, key: str) -> Cell:
    return summary.get(target, {}).get(key, Cell(None))


def _value(summary: Mapping[str, Mapping[str, Cell]], target: str, key: str) -> float | None:
    return _cell(summary, target, key).value


def _ratio_target(
    summary: Mapping[str, Mapping[str, Cell]],
    name: str,
    ours: str,
    peer: str,
    threshold: float,
    key: str = "drain",
    also: str | None = "drain_first",
) -> TargetResult:
    """``ours`` ÷ ``peer`` on ``key`` ≥ ``threshold``; the detail adds ``also``'s ratio and the
    per-trial ratios."""
    metric = METRIC_BY_KEY[key]
    found = ratio(metric, _value(summary, ours, key), _value(summary, peer, key))
    if found is None:
        needs = f"not measured (needs {display_name(ours)} and {display_name(peer)})"
        return TargetResult(name, ours, None, None, threshold, needs)
    details = []
    if also is not None:
        other = ratio(METRIC_BY_KEY[also], _value(summary, ours, also), _value(summary, peer, also))
        if other is not None:
            details.append(f"{METRIC_BY_KEY[also].label}: {other:.2f}x")
    per_trial = trial_ratios(metric, _cell(summary, ours, key), _cell(summary, peer, key))
    if len(per_trial) > 1:
        shown = ("-" if r is None else f"{r:.2f}x" for r in per_trial)
        details.append(f"trials: {', '.join(shown)}")
    against = "" if threshold == 1.0 else f" vs {threshold:.1f}x"
    margin = f"{found:.2f}x ({(found / threshold - 1) * 100:+.0f}%{against})"
    met = found >= threshold
    return TargetResult(name, ours, met, found, threshold, margin, "; ".join(details))


def _io_target(summary: Mapping[str, Mapping[str, Cell]]) -> TargetResult:
    name = "io 10 ms x16 ≥ 90% of 1,600 jobs/s (1st→last)"
    threshold = 0.9 * IO_CEILING
    value = _value(summary, REFERENCE, "io_first")
    if value is None:
        return TargetResult(name, REFERENCE, None, None, threshold, "not measured")
    share = value / IO_CEILING * 100
    launch = _value(summary, REFERENCE, "io")
    detail = f"launch→last: {launch:,.0f} jobs/s = {launch / IO_CEILING:.1%}" if launch else ""
    margin = f"{value:,.0f} jobs/s = {share:.1f}% ({share - 90:+.1f} points)"
    return TargetResult(name, REFERENCE, value >= threshold, value, threshold, margin, detail)


def _latency_target(
    summary: Mapping[str, Mapping[str, Cell]], name: str, ours: str, threshold: float
) -> TargetResult:
    """``ours``' start latency p99 ≤ ``threshold`` ms; the detail gives its p50."""
    value = _value(summary, ours, "latency_p99")
    if value is None:
        return TargetResult(name, ours, None, None, threshold, "not measured")
    gap = threshold - value
    margin = f"{value:.1f} ms ({abs(gap):.1f} ms {'under' if gap >= 0 else 'over'})"
    p50 = _value(summary, ours, "latency_p50")
    detail = "" if p50 is None else f"p50: {p50:.1f} ms"
    return TargetResult(name, ours, value <= threshold, value, threshold, margin, detail)


def evaluate_targets(summary: Mapping[str, Mapping[str, Cell]]) -> list[TargetResult]:
    """The issue's targets: four for ledgerq on PostgreSQL, four for its Redis transport, two
    for ledgerq on SQLite."""
    return [
        _ratio_target(summary, "drain ≥ 1.0x pgqueuer (launch→last)", REFERENCE, "pgqueuer", 1.0),
        _ratio_target(
            summary,
            "bulk enqueue ≥ 1.0x pgqueuer",
            REFERENCE,
            "pgqueuer",
            1.0,
            key="enqueue_bulk",
            also=None,
        ),
        _io_target(summary),
        _latency_target(summary, "start latency p99 ≤ 10 ms (LISTEN/NOTIFY)", REFERENCE, 10.0),
        _ratio_target(
            summary, "drain ≥ 1.2x pgqueuer (Redis, launch→last)", REDIS, "pgqueuer", 1.2
        ),
        _ratio_target(
            summary, "drain ≥ 2.0x dramatiq (Redis, launch→last)", REDIS, "dramatiq", 2.0
        ),
        _latency_target(summary, "start latency p99 ≤ 5 ms (Redis)", REDIS, 5.0),
        _ratio_target(
            summary,
            "drain during a Redis outage ≥ 0.5x with Redis (launch→last)",
            REDIS_DOWN,
            REDIS,
            0.5,
        ),
        _ratio_target(
            summary, "drain ≥ 1.5x huey_sqlite (SQLite, launch→last)", SQLITE, HUEY_SQLITE, 1.5
        ),
        _ratio_target(
            summary,
            "single enqueue ≥ 1.0x huey_sqlite (SQLite)",
            SQLITE,
            HUEY_SQLITE,
            1.0,
            key="enqueue_single",
            also=None,
        ),
    ]
