"""Issue 29's targets of ``ledgerq bench``, met or missed and by how much. Pure, like
bench_report.py. Judged on the unpinned ledgerq targets (the defaults a user gets); a
``_pinned`` target is shown in the tables but never judged.

* ledgerq on PostgreSQL with LISTEN/NOTIFY (``ledgerq_postgresql``): bulk enqueue and drain
  >= 1.2x pgqueuer, start latency p99 <= 3.0 ms, io at >= 97% (1st->last) and >= 85%
  (launch->last) of 1,600 jobs/s.
* With the Redis transport (``ledgerq_postgresql_redis``): bulk enqueue within 10% of without,
  drain >= 1.6x pgqueuer and >= 2.5x dramatiq, start latency p99 <= 2.0 ms and p50 <= 1.0 ms,
  single enqueue >= 1.0x pgqueuer, the same io targets.
* Both, when their memory modes ran: worker RSS idle and busy beside dramatiq's and celery's
  (informational) and no growth over a drain (RSS at 100% <= RSS at 10% x 1.05).
* During a Redis outage (issue 3's guarantee): drain >= 0.5x the drain with Redis.
* ledgerq on SQLite against huey on SQLite: drain >= 1.5x and single enqueue >= 1.0x.
"""

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
#: The peers whose worker memory is shown beside ledgerq's (issue 29 item 6).
MEMORY_PEERS = ("dramatiq", "celery")
#: RSS at 100% of a drain may exceed RSS at 10% by this share and still count as no growth.
GROWTH_ALLOWED = 0.05

Summary = Mapping[str, Mapping[str, Cell]]


@dataclass(frozen=True, slots=True)
class TargetResult:
    """One of the issue's targets for the ledgerq target ``ledgerq``: whether it is met (None:
    not measured, or ``informational``: shown, never judged) and by how much."""

    name: str
    ledgerq: str
    met: bool | None
    value: float | None
    threshold: float | None
    margin: str
    detail: str = ""
    informational: bool = False

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
            "informational": self.informational,
        }


def _cell(summary: Summary, target: str, key: str) -> Cell:
    return summary.get(target, {}).get(key, Cell(None))


def _value(summary: Summary, target: str, key: str) -> float | None:
    return _cell(summary, target, key).value


def _ratio_target(
    summary: Summary,
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


#: The io targets: metric key, its label in a name, the other key shown beside, the percent.
_IO = {"io_first": ("1st→last", "io", 97), "io": ("launch→last", "io_first", 85)}


def _io_target(summary: Summary, ours: str, key: str) -> TargetResult:
    """``ours``' io rate on ``key`` ≥ its percent of 1,600 jobs/s; the detail gives the other."""
    label, other_key, percent = _IO[key]
    name = f"io 10 ms x16 ≥ {percent}% of 1,600 jobs/s ({label})"
    threshold = IO_CEILING * percent / 100
    value = _value(summary, ours, key)
    if value is None:
        return TargetResult(name, ours, None, None, threshold, "not measured")
    share = value / IO_CEILING * 100
    other = _value(summary, ours, other_key)
    other_label = _IO[other_key][0]
    detail = f"{other_label}: {other:,.0f} jobs/s = {other / IO_CEILING:.1%}" if other else ""
    margin = f"{value:,.0f} jobs/s = {share:.1f}% ({share - percent:+.1f} points)"
    return TargetResult(name, ours, value >= threshold, value, threshold, margin, detail)


def _latency_target(
    summary: Summary, ours: str, key: str, threshold: float, transport: str
) -> TargetResult:
    """``ours``' start latency at ``key`` (p50 or p99) ≤ ``threshold`` ms; the detail gives the
    other percentile."""
    name = f"start latency {key.removeprefix('latency_')} ≤ {threshold:.1f} ms ({transport})"
    value = _value(summary, ours, key)
    if value is None:
        return TargetResult(name, ours, None, None, threshold, "not measured")
    gap = threshold - value
    margin = f"{value:.1f} ms ({abs(gap):.1f} ms {'under' if gap >= 0 else 'over'})"
    other_key = "latency_p50" if key == "latency_p99" else "latency_p99"
    other = _value(summary, ours, other_key)
    detail = "" if other is None else f"{other_key.removeprefix('latency_')}: {other:.1f} ms"
    return TargetResult(name, ours, value <= threshold, value, threshold, margin, detail)


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _memory_shown(summary: Summary, ours: str) -> TargetResult | None:
    """``ours``' worker RSS idle and with 8 slots busy beside dramatiq's and celery's, never
    judged; None unless the memory mode ran. ``value``: ledgerq's idle RSS in MB (else busy)."""
    if "rss_idle" not in summary.get(ours, {}):
        return None
    name = "worker RSS idle / 8 slots busy, beside dramatiq and celery"
    idle, busy = _value(summary, ours, "rss_idle"), _value(summary, ours, "rss_busy")
    if idle is None and busy is None:
        return TargetResult(name, ours, None, None, None, "not measured", informational=True)
    peers = [
        f"{p}: {_mb(_value(summary, p, 'rss_idle'))} / {_mb(_value(summary, p, 'rss_busy'))} MB"
        for p in MEMORY_PEERS
        if p in summary
    ]
    margin = f"{_mb(idle)} / {_mb(busy)} MB"
    detail = "; ".join(peers) or "dramatiq, celery: not run"
    shown = idle if idle is not None else busy
    return TargetResult(name, ours, None, shown, None, margin, detail, informational=True)


def _growth(summary: Summary, target: str) -> tuple[float, float] | None:
    at_10 = _value(summary, target, "rss_drain_10")
    at_100 = _value(summary, target, "rss_drain_100")
    if at_10 is None or at_100 is None or at_10 <= 0:
        return None
    return at_10, at_100


def _growth_target(summary: Summary, ours: str) -> TargetResult | None:
    """No growth over a drain: RSS at 100% ≤ RSS at 10% x 1.05; ``value`` is their ratio. None
    unless the memory_drain mode ran."""
    if "rss_drain_10" not in summary.get(ours, {}):
        return None
    limit = 1 + GROWTH_ALLOWED
    name = f"no RSS growth over a drain (100% ≤ 10% x {limit:.2f})"
    found = _growth(summary, ours)
    if found is None:
        return TargetResult(name, ours, None, None, limit, "not measured")
    at_10, at_100 = found
    pct = (at_100 / at_10 - 1) * 100
    gap = GROWTH_ALLOWED * 100 - pct
    margin = (
        f"{at_100 - at_10:+.1f} MB = {pct:+.1f}% "
        f"({abs(gap):.1f} points {'under' if gap >= 0 else 'over'})"
    )
    details = [f"RSS {at_10:.1f} → {at_100:.1f} MB"]
    for peer in MEMORY_PEERS:
        if (theirs := _growth(summary, peer)) is not None:
            details.append(f"{peer}: {theirs[1] - theirs[0]:+.1f} MB")
    met = at_100 <= at_10 * limit
    return TargetResult(name, ours, met, at_100 / at_10, limit, margin, "; ".join(details))


def _memory_targets(summary: Summary, ours: str) -> list[TargetResult]:
    found = [_memory_shown(summary, ours), _growth_target(summary, ours)]
    return [t for t in found if t is not None]


def _io_targets(summary: Summary, ours: str) -> list[TargetResult]:
    return [_io_target(summary, ours, "io_first"), _io_target(summary, ours, "io")]


def _postgresql_targets(summary: Summary) -> list[TargetResult]:
    """Issue 29 items 1, 2, 3, 5 and 6 for ledgerq on PostgreSQL with LISTEN/NOTIFY."""
    return [
        _ratio_target(
            summary,
            "bulk enqueue ≥ 1.2x pgqueuer",
            REFERENCE,
            "pgqueuer",
            1.2,
            "enqueue_bulk",
            None,
        ),
        _ratio_target(summary, "drain ≥ 1.2x pgqueuer (launch→last)", REFERENCE, "pgqueuer", 1.2),
        _latency_target(summary, REFERENCE, "latency_p99", 3.0, "LISTEN/NOTIFY"),
        *_io_targets(summary, REFERENCE),
        *_memory_targets(summary, REFERENCE),
    ]


def _redis_targets(summary: Summary) -> list[TargetResult]:
    """Issue 29 items 1 to 6 for ledgerq on PostgreSQL with the Redis transport."""
    return [
        _ratio_target(
            summary,
            "bulk enqueue with Redis within 10% of without (≥ 0.9x)",
            REDIS,
            REFERENCE,
            0.9,
            "enqueue_bulk",
            None,
        ),
        _ratio_target(
            summary, "drain ≥ 1.6x pgqueuer (Redis, launch→last)", REDIS, "pgqueuer", 1.6
        ),
        _ratio_target(
            summary, "drain ≥ 2.5x dramatiq (Redis, launch→last)", REDIS, "dramatiq", 2.5
        ),
        _latency_target(summary, REDIS, "latency_p99", 2.0, "Redis"),
        _latency_target(summary, REDIS, "latency_p50", 1.0, "Redis"),
        _ratio_target(
            summary,
            "single enqueue ≥ 1.0x pgqueuer (Redis)",
            REDIS,
            "pgqueuer",
            1.0,
            "enqueue_single",
            None,
        ),
        *_io_targets(summary, REDIS),
        *_memory_targets(summary, REDIS),
    ]


def evaluate_targets(summary: Summary) -> list[TargetResult]:
    """The issue's targets, grouped by the ledgerq target they judge: PostgreSQL with
    LISTEN/NOTIFY, with Redis, during a Redis outage, SQLite (see the module docstring)."""
    return [
        *_postgresql_targets(summary),
        *_redis_targets(summary),
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
