"""The bench's vocabulary: the metrics of its table, one cell (median over trials) and the
ratio of ledgerq to a peer, oriented so that above 1.0 means ledgerq is better. Shared by the
report (bench_report.py) and the targets (targets.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: ledgerq on PostgreSQL: the subject of the JSON's ``ratios`` and of the polling targets.
REFERENCE = "ledgerq_postgresql"
#: How every ratio is oriented (shown in the JSON output).
RATIO_ORIENTATION = (
    "above 1.0 = ledgerq better (throughput ledgerq/peer, latency and memory peer/ledgerq)"
)


@dataclass(frozen=True, slots=True)
class Metric:
    """One row of the table: a field of one harness mode's result."""

    key: str
    mode: str
    field: str
    label: str
    unit: str
    higher_is_better: bool = True
    partial_field: str | None = None


METRICS: tuple[Metric, ...] = (
    Metric("enqueue_single", "enqueue_single", "rate", "enqueue single", "jobs/s"),
    Metric("enqueue_bulk", "enqueue_bulk", "rate", "enqueue bulk", "jobs/s"),
    Metric(
        "drain",
        "drain",
        "rate_from_launch",
        "drain no-op, launch→last",
        "jobs/s",
        partial_field="partial_rate",
    ),
    Metric(
        "drain_first",
        "drain",
        "rate_first_to_last",
        "drain no-op, 1st→last",
        "jobs/s",
        partial_field="partial_rate_first_to_cap",
    ),
    Metric(
        "io",
        "io",
        "rate_from_launch",
        "io 10 ms x16, launch→last",
        "jobs/s",
        partial_field="partial_rate",
    ),
    Metric(
        "io_first",
        "io",
        "rate_first_to_last",
        "io 10 ms x16, 1st→last",
        "jobs/s",
        partial_field="partial_rate_first_to_cap",
    ),
    Metric("latency_p50", "latency", "p50_ms", "start latency p50", "ms", higher_is_better=False),
    Metric("latency_p99", "latency", "p99_ms", "start latency p99", "ms", higher_is_better=False),
    Metric("rss_idle", "memory", "idle_rss_mb", "RSS of a worker process, idle", "MB", False),
    Metric(
        "rss_busy", "memory", "busy_rss_mb", "RSS of a worker process, 8 slots busy", "MB", False
    ),
    Metric("rss_drain_10", "memory_drain", "rss_10pct_mb", "RSS at 10% of a drain", "MB", False),
    Metric("rss_drain_100", "memory_drain", "rss_100pct_mb", "RSS at 100% of a drain", "MB", False),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}


@dataclass(frozen=True, slots=True)
class Cell:
    """The median of one metric over a target's trials; ``note`` says what is unusual.
    ``trial_ids`` holds the ``trial`` of each value in ``trials``, to pair trials of two targets."""

    value: float | None
    trials: tuple[float, ...] = ()
    note: str = ""
    trial_ids: tuple[object, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {"value": self.value, "trials": list(self.trials), "note": self.note}


def display_name(target: str) -> str:
    """``ledgerq_postgresql`` -> ``ledgerq/postgresql``; peers keep their names."""
    return target.replace("ledgerq_", "ledgerq/", 1) if target.startswith("ledgerq_") else target


def ratio(metric: Metric, ledgerq: float | None, peer: float | None) -> float | None:
    """ledgerq's ratio to a peer, above 1.0 when ledgerq is better; None if not comparable."""
    if ledgerq is None or peer is None:
        return None
    numerator, denominator = (ledgerq, peer) if metric.higher_is_better else (peer, ledgerq)
    if denominator <= 0:
        return None
    return numerator / denominator


def trial_ratios(metric: Metric, ours: Cell, peer: Cell) -> list[float | None]:
    """ledgerq's ratio to the peer per trial, trial i with trial i (they ran in one round);
    empty unless both have the same trials."""
    if len(ours.trials) != len(peer.trials) or ours.trial_ids != peer.trial_ids:
        return []
    return [ratio(metric, a, b) for a, b in zip(ours.trials, peer.trials, strict=True)]
