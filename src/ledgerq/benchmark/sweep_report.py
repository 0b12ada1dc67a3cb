"""Pure result handling of the process-count sweep (``ledgerq bench --procs 1,2,4``): result
rows (harness line + CPU readings + ``procs``) in, one cell per (mode, procs, target) out, as
rich tables, Markdown and JSON. No I/O, so every rule here is unit-tested.

Per cell, over its trials: the median of each throughput and of each CPU figure. CPU figures
are per 1,000 jobs (``db_cpu_s`` / ``n`` x 1,000) and, for the database, as a utilisation:
backend CPU seconds / seconds from the first job's end to the last's (the window of the
workers' whole life when the run did not finish), in percent of one core.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from ledgerq.benchmark import BenchError
from ledgerq.benchmark.bench_cells import display_name

#: The measurements a sweep runs: the two whose figures depend on the number of workers.
SWEEP_MODES = ("drain", "io")
#: The largest process count a sweep accepts (each process opens its own database pools).
MAX_PROCS = 64
COLUMNS = (
    ("rate_from_launch", "jobs/s launch→last"),
    ("rate_first_to_last", "jobs/s 1st→last"),
    ("db_cpu_per_1k", "DB CPU s / 1k jobs"),
    ("db_util_pct", "DB CPU % of a core"),
    ("worker_cpu_per_1k", "workers CPU s / 1k jobs"),
    ("redis_cpu_per_1k", "Redis CPU s / 1k jobs"),
    ("db_backends", "DB backends"),
)


def parse_procs(value: str) -> list[int]:
    """``--procs 1,2,4`` as sorted distinct counts; ``BenchError`` for anything else."""
    found: set[int] = set()
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        if not part.isdigit() or not 1 <= int(part) <= MAX_PROCS:
            raise BenchError(
                f"--procs takes worker process counts from 1 to {MAX_PROCS}, comma-separated"
                f" (e.g. 1,2,4,8,16), got {part!r}"
            )
        found.add(int(part))
    if not found:
        raise BenchError("--procs needs at least one worker process count, e.g. 1,2,4,8,16")
    return sorted(found)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def derive(row: Mapping[str, Any]) -> dict[str, float | None]:
    """One run's figures: its rates and its CPU per 1,000 jobs; None where not measured."""
    n = _number(row.get("n"))
    complete = bool(row.get("complete")) and "error" not in row
    window = _number(row.get("window_s"))
    total, startup = _number(row.get("seconds_from_launch")), _number(row.get("startup_s"))
    if complete and total is not None and startup is not None and total > startup:
        window = total - startup

    def per_1k(key: str) -> float | None:
        cpu = _number(row.get(key))
        return None if cpu is None or not n or not complete else cpu / n * 1000

    db = _number(row.get("db_cpu_s"))
    return {
        "rate_from_launch": _number(row.get("rate_from_launch")),
        "rate_first_to_last": _number(row.get("rate_first_to_last")),
        "db_cpu_per_1k": per_1k("db_cpu_s"),
        "db_util_pct": None if db is None or not window else db / window * 100,
        "worker_cpu_per_1k": per_1k("worker_cpu_s"),
        "redis_cpu_per_1k": per_1k("redis_cpu_s"),
        "db_backends": _number(row.get("db_backends")),
    }


@dataclass(frozen=True, slots=True)
class SweepCell:
    """The medians of one (mode, procs, target) over its trials, and what went wrong."""

    mode: str
    procs: int
    target: str
    values: dict[str, float | None]
    trials: int
    failed: int

    def as_json(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {
            "mode": self.mode,
            "procs": self.procs,
            "target": self.target,
            "trials": self.trials,
            "failed": self.failed,
            **{k: None if v is None else round(v, 4) for k, v in self.values.items()},
        }


def _median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def summarize(rows: Iterable[Mapping[str, Any]]) -> list[SweepCell]:
    """One cell per (mode, procs, target), ordered by mode, then procs, then first appearance."""
    grouped: dict[tuple[str, int, str], list[Mapping[str, Any]]] = {}
    order: list[str] = []
    for row in rows:
        target = str(row.get("target"))
        if target not in order:
            order.append(target)
        key = (str(row.get("mode")), int(row.get("procs") or 0), target)
        grouped.setdefault(key, []).append(row)
    cells = []
    for (mode, procs, target), runs in grouped.items():
        derived = [derive(r) for r in runs]
        values = {key: _median(d[key] for d in derived) for key, _ in COLUMNS}
        failed = sum(1 for r in runs if "error" in r or not r.get("complete"))
        cells.append(SweepCell(mode, procs, target, values, len(runs), failed))
    mode_rank = {m: i for i, m in enumerate(SWEEP_MODES)}
    cells.sort(key=lambda c: (mode_rank.get(c.mode, 99), c.procs, order.index(c.target)))
    return cells


def format_figure(key: str, value: float | None) -> str:
    """Rates as whole jobs/s, CPU per 1k jobs to 3 decimals, utilisation as whole percent."""
    if value is None:
        return "-"
    if key.startswith("rate"):
        return f"{value:,.0f}"
    if key == "db_util_pct":
        return f"{value:.0f}%"
    if key == "db_backends":
        return f"{value:.0f}"
    return f"{value:.3f}"


def _cells_row(cell: SweepCell) -> list[str]:
    shown = [format_figure(key, cell.values[key]) for key, _ in COLUMNS]
    if cell.failed:
        shown[0] += f" ({cell.failed} of {cell.trials} failed)"
    return [str(cell.procs), display_name(cell.target), *shown]


def tables(cells: Sequence[SweepCell], trials: int) -> list[Table]:
    """A rich table per mode: rows procs x target, columns the figures of ``COLUMNS``."""
    out = []
    for mode in dict.fromkeys(c.mode for c in cells):
        table = Table(title=f"ledgerq bench --procs: {mode} (median of {trials})")
        for label in ("procs", "backend", *(label for _, label in COLUMNS)):
            table.add_column(label, justify="left" if label == "backend" else "right")
        mode_cells = [c for c in cells if c.mode == mode]
        for i, cell in enumerate(mode_cells):
            last = i + 1 == len(mode_cells) or mode_cells[i + 1].procs != cell.procs
            table.add_row(*_cells_row(cell), end_section=last)
        out.append(table)
    return out


def markdown(cells: Sequence[SweepCell]) -> str:
    """The sweep as GitHub Markdown: a table per mode."""
    lines: list[str] = []
    for mode in dict.fromkeys(c.mode for c in cells):
        header = ["procs", "backend", *(label for _, label in COLUMNS)]
        lines += [f"{mode}:", "", "| " + " | ".join(header) + " |"]
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(_cells_row(c)) + " |" for c in cells if c.mode == mode]
        lines.append("")
    return "\n".join(lines)


def as_json(cells: Sequence[SweepCell], context: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep for machines: the run's context and one object per cell."""
    return {**context, "sweep": [c.as_json() for c in cells]}
