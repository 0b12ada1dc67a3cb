"""Pure result handling of ``ledgerq bench``: harness JSON lines in, medians per cell, each
ledgerq target's ratio to each peer and the issue's targets (rules in targets.py) out. No I/O,
so every rule here is unit-tested.

Ratios are always oriented so that above 1.0 means ledgerq is better: ledgerq ÷ peer for
throughput, peer ÷ ledgerq for latency.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledgerq.benchmark.bench_cells import (
    METRIC_BY_KEY,
    METRICS,
    RATIO_ORIENTATION,
    REFERENCE,
    Cell,
    Metric,
    display_name,
    ratio,
)
from ledgerq.benchmark.targets import TargetResult, evaluate_targets


def parse_result_line(stdout: str) -> dict[str, Any] | None:
    """The harness's result: the last line of ``stdout`` that is a JSON object, or None."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _finite(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and value == value
        and value not in (float("inf"), float("-inf"))
    )


def _first_line(text: str, limit: int = 80) -> str:
    return " ".join(text.split())[:limit]


def summarize_cell(
    rows: Sequence[Mapping[str, Any]], metric: Metric, lat_rate: float | None = None
) -> Cell:
    """Median of ``metric`` over ``rows`` (one per trial), falling back to the partial rate.

    A latency cell is flagged when the producer fell below 95% of ``lat_rate`` (jobs/s): then
    it measured another load than the one asked for.
    """
    if not rows:
        return Cell(None, note="not run")
    if any("skipped" in r for r in rows):
        return Cell(None, note="n/a")
    errors = [r for r in rows if "error" in r]
    kept = [r for r in rows if _finite(r.get(metric.field))]
    used = metric.field
    notes = []
    if not kept and metric.partial_field:
        used = metric.partial_field
        kept = [r for r in rows if _finite(r.get(used))]
        notes.append("partial" if kept else "")
    values = tuple(float(r[used]) for r in kept)
    if not values:
        return Cell(None, note="error" if errors else "no result")
    if errors:
        notes.append(f"{len(errors)} of {len(rows)} trials failed")
    if metric.mode == "latency":
        notes += _latency_notes(rows, lat_rate)
    ids = tuple(r.get("trial") for r in kept)
    return Cell(statistics.median(values), values, ", ".join(filter(None, notes)), ids)


def _latency_notes(rows: Sequence[Mapping[str, Any]], lat_rate: float | None) -> list[str]:
    notes = []
    if any(r.get("completed", 0) < r.get("sent", 0) for r in rows):
        notes.append("incomplete")
    paced = [float(r["producer_rate"]) for r in rows if _finite(r.get("producer_rate"))]
    if lat_rate and paced and min(paced) < 0.95 * lat_rate:
        notes.append(f"producer reached only {min(paced):,.0f}/s")
    return notes


def summarize(
    rows: Iterable[Mapping[str, Any]], lat_rate: float | None = None
) -> dict[str, dict[str, Cell]]:
    """target -> metric key -> Cell, from result rows that carry ``target`` and ``mode``."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    targets: list[str] = []
    for row in rows:
        target = str(row.get("target") or row.get("peer"))
        if target not in targets:
            targets.append(target)
        grouped[(target, str(row.get("mode")))].append(row)
    modes_run = {mode for _, mode in grouped}
    return {
        target: {
            m.key: summarize_cell(grouped.get((target, m.mode), []), m, lat_rate)
            for m in METRICS
            if m.mode in modes_run
        }
        for target in targets
    }


def problems(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """One line per failed run: which target, mode and trial, and the harness's error."""
    return [
        f"{display_name(str(r.get('target') or r.get('peer')))} {r.get('mode')} "
        f"(trial {r.get('trial')}): {_first_line(str(r['error']), 200)}"
        for r in rows
        if "error" in r
    ]


def ratios(
    summary: Mapping[str, Mapping[str, Cell]], reference: str = REFERENCE
) -> dict[str, dict[str, float | None]]:
    """peer -> metric key -> ratio of ``reference`` to that peer (ledgerq targets excluded)."""
    ours = summary.get(reference, {})
    return {
        peer: {
            key: ratio(METRIC_BY_KEY[key], ours.get(key, Cell(None)).value, cell.value)
            for key, cell in cells.items()
        }
        for peer, cells in summary.items()
        if not peer.startswith("ledgerq_")
    }


def ratios_by_target(
    summary: Mapping[str, Mapping[str, Cell]],
) -> dict[str, dict[str, dict[str, float | None]]]:
    """ledgerq target -> peer -> metric key -> ratio, for every measured ledgerq target."""
    return {t: ratios(summary, t) for t in summary if t.startswith("ledgerq_")}


@dataclass
class Report:
    """Everything one ``ledgerq bench`` run shows: cells, ratios and targets."""

    summary: dict[str, dict[str, Cell]]
    ratios_by_target: dict[str, dict[str, dict[str, float | None]]]
    targets: list[TargetResult]
    context: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_rows(
        cls,
        rows: Sequence[Mapping[str, Any]],
        context: Mapping[str, Any] | None = None,
        lat_rate: float | None = None,
    ) -> Report:
        """Build the report of harness result rows; ``lat_rate`` is the latency run's pace."""

        summary = summarize(rows, lat_rate)
        return cls(
            summary,
            ratios_by_target(summary),
            evaluate_targets(summary),
            dict(context or {}),
            problems(rows),
        )

    def metrics(self) -> list[Metric]:
        """The metrics that were measured, in table order."""
        keys = {k for cells in self.summary.values() for k in cells}
        return [m for m in METRICS if m.key in keys]

    def as_json(self) -> dict[str, Any]:
        """Raw medians, ratios and targets as one JSON-ready document. ``ratios`` keeps its
        shape (``reference``'s ratio per peer); ``ratios_by_target`` has every ledgerq target's."""
        return {
            **self.context,
            "reference": REFERENCE,
            "ratio_orientation": RATIO_ORIENTATION,
            "metrics": [
                {
                    "key": m.key,
                    "label": m.label,
                    "unit": m.unit,
                    "better": "higher" if m.higher_is_better else "lower",
                }
                for m in self.metrics()
            ],
            "results": {
                t: {k: c.as_json() for k, c in cells.items()} for t, cells in self.summary.items()
            },
            "ratios": ratios(self.summary),
            "ratios_by_target": self.ratios_by_target,
            "targets": [t.as_json() for t in self.targets],
            "problems": self.problems,
        }
