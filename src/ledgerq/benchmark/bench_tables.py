"""Renders a bench Report for people: rich tables for the terminal, Markdown for
``docs/benchmarks.md`` and the results folder. Shapes only; every number comes from report.py."""

from __future__ import annotations

from itertools import groupby

from rich.table import Table
from rich.text import Text

from ledgerq.benchmark.bench_cells import Cell, Metric, display_name
from ledgerq.benchmark.bench_report import Report
from ledgerq.benchmark.targets import TargetResult

RATIO_CAPTION = (
    "Under each peer's figure: each ledgerq target's ratio to it (throughput ledgerq ÷ peer, "
    "latency and memory peer ÷ ledgerq), so above 1.00x ledgerq is better."
)
RATIO_NOTE = (
    "above 1.00x = ledgerq better: throughput ledgerq ÷ peer, latency and memory peer ÷ ledgerq"
)


def format_value(metric: Metric, value: float | None) -> str:
    """A figure as shown: whole jobs/s with thousands separators, ms and MB to one decimal."""
    if value is None:
        return "-"
    if metric.unit in ("ms", "MB") and value < 100:
        return f"{value:.1f}"
    return f"{value:,.0f}"


def format_cell(metric: Metric, cell: Cell | None) -> str:
    """A cell's median, with its note (partial, n/a, error ...) when it has one."""
    if cell is None:
        return "not run"
    if cell.value is None:
        return cell.note or "-"
    shown = format_value(metric, cell.value)
    return f"{shown} ({cell.note})" if cell.note else shown


def format_ratio(value: float | None) -> str:
    """``1.23x``, or ``-`` when the two could not be compared."""
    return "-" if value is None else f"{value:.2f}x"


def verdict(target: TargetResult) -> str:
    """``met``, ``MISSED``, ``measured`` (an informational target) or ``not measured``."""
    if target.met is None:
        return "measured" if target.informational and target.value is not None else "not measured"
    return "met" if target.met else "MISSED"


def _split(report: Report) -> tuple[list[str], list[str]]:
    ours = [t for t in report.summary if t.startswith("ledgerq_")]
    return ours, [t for t in report.summary if not t.startswith("ledgerq_")]


def _ratio(report: Report, ledgerq: str, peer: str, key: str) -> float | None:
    return report.ratios_by_target.get(ledgerq, {}).get(peer, {}).get(key)


def _by_ledgerq(report: Report) -> list[tuple[str, list[TargetResult]]]:
    """The targets grouped by the ledgerq target they are about, in evaluation order."""
    return [(key, list(group)) for key, group in groupby(report.targets, lambda t: t.ledgerq)]


def results_table(report: Report) -> Table:
    """Rows = measurements; columns = ledgerq per backend, then each peer with the ratio of
    each ledgerq target to it (named by backend when there are several)."""
    ours, peers = _split(report)
    trials = report.context.get("trials", 1)
    table = Table(
        title=f"ledgerq bench (median of {trials} trial{'s' if trials != 1 else ''})",
        caption=RATIO_CAPTION,
        caption_justify="left",
    )
    table.add_column("measurement")
    table.add_column("unit")
    for target in [*ours, *peers]:
        table.add_column(display_name(target), justify="right")
    for metric in report.metrics():
        row: list[str | Text] = [metric.label, metric.unit]
        row += [format_cell(metric, report.summary[t].get(metric.key)) for t in ours]
        for peer in peers:
            text = Text(format_cell(metric, report.summary[peer].get(metric.key)))
            for ledgerq in ours:
                found = _ratio(report, ledgerq, peer, metric.key)
                if found is None:
                    continue
                label = f"{ledgerq.removeprefix('ledgerq_')}: " if len(ours) > 1 else ""
                style = "green" if found >= 1 else "red"
                text.append(f"\n{label}{format_ratio(found)}", style=style)
            row.append(text)
        table.add_row(*row)
    return table


def _style(target: TargetResult) -> str:
    if target.met is None:
        return "cyan" if verdict(target) == "measured" else "yellow"
    return "green" if target.met else "red"


def targets_table(report: Report) -> Table:
    """The issue's targets, a section per ledgerq target: met, missed (by how much), not
    measured, or measured (memory: shown beside the peers, not judged)."""
    table = Table(title="targets")
    for column in ("ledgerq", "target", "result", "measured", "also"):
        table.add_column(column)
    for ledgerq, group in _by_ledgerq(report):
        for i, target in enumerate(group):
            table.add_row(
                display_name(ledgerq) if i == 0 else "",
                target.name,
                Text(verdict(target), style=_style(target)),
                target.margin,
                target.detail,
                end_section=i == len(group) - 1,
            )
    return table


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown(report: Report) -> str:
    """The figures, ratio and target tables as GitHub Markdown."""
    ours, peers = _split(report)
    metrics = report.metrics()
    lines = [
        _md_row(["measurement", "unit", *(display_name(t) for t in [*ours, *peers])]),
        _md_row(["---"] * (2 + len(ours) + len(peers))),
    ]
    for metric in metrics:
        cells = [format_cell(metric, report.summary[t].get(metric.key)) for t in [*ours, *peers]]
        lines.append(_md_row([metric.label, metric.unit, *cells]))
    for ledgerq in ours if peers else []:  # a ratio table per ledgerq target
        lines += ["", f"{display_name(ledgerq)}'s ratio to each peer ({RATIO_NOTE}):", ""]
        lines.append(_md_row(["measurement", *peers]))
        lines.append(_md_row(["---"] * (1 + len(peers))))
        for metric in metrics:
            found = [format_ratio(_ratio(report, ledgerq, p, metric.key)) for p in peers]
            lines.append(_md_row([metric.label, *found]))
    for ledgerq, group in _by_ledgerq(report):
        lines += [
            "",
            _md_row([f"target ({display_name(ledgerq)})", "result", "measured", "also"]),
            _md_row(["---"] * 4),
        ]
        lines += [_md_row([t.name, verdict(t), t.margin, t.detail]) for t in group]
    if report.problems:
        lines += ["", "Failed runs:", ""] + [f"- {p}" for p in report.problems]
    return "\n".join(lines) + "\n"
