"""``ledgerq bench --procs 1,2,4,8,16``: the process-count sweep. The ledgerq backends' drain
and io at each worker process count, with the CPU the database, the workers and Redis spent
(benchmark/sweep_runner.py), as one table per measurement, or JSON."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from ledgerq.benchmark import (
    BenchError,
    bench_report,
    bench_runner,
    peers,
    sweep_report,
    sweep_runner,
)
from ledgerq.cli.cli_context import CliContext
from ledgerq.cli.commands import bench_setup


def sweep_modes(value: str | None) -> list[str]:
    """``--only`` for a sweep: drain and/or io (both by default); ``BenchError`` otherwise."""
    if not value:
        return list(sweep_report.SWEEP_MODES)
    modes = bench_setup.parse_modes(value)
    other = [m for m in modes if m not in sweep_report.SWEEP_MODES]
    if other:
        raise BenchError(f"--procs sweeps drain and io only; drop {', '.join(other)} from --only")
    return modes


def run(cli: CliContext, options: dict[str, Any]) -> int:
    """Check the options, run the sweep under the bench lock, print or emit it."""
    procs = sweep_report.parse_procs(options["procs"])
    modes = sweep_modes(options["only"])
    backends = bench_setup.parse_backends(options["backends"])
    if options["peer_names"]:
        raise BenchError("--procs sweeps ledgerq's workers only: drop --peers")
    bench_runner.check_extra()
    bench_runner.check_redis()
    with bench_runner.exclusive():
        cells, context = _measure(options, procs, modes, backends)
    if cli.as_json:
        cli.emit_json(sweep_report.as_json(cells, context))
        return 0
    out = cli.console if cli.console.is_terminal else Console(width=220, highlight=False)
    for table in sweep_report.tables(cells, options["trials"]):
        out.print(table)
    for problem in context["problems"]:
        out.print(f"failed: {problem}", markup=False)
    out.print(f"raw results: {context['results_file']}", markup=False)
    return 0


def _measure(
    options: dict[str, Any], procs: list[int], modes: list[str], backends: list[str]
) -> tuple[list[sweep_report.SweepCell], dict[str, Any]]:
    note = Console(stderr=True, highlight=False, soft_wrap=True)
    scratch = options["scratch"] or peers.default_scratch()
    peers_dir = peers.sync(peers.find_source(options["peers_source"]), scratch)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    watcher = sweep_runner.Watcher()
    bench = bench_setup.new_runner(options, peers_dir, f"sweep-{stamp}.jsonl", watcher)
    try:
        targets = bench_setup.ledgerq_targets(bench, backends, options, note)
        if not targets:
            raise BenchError("nothing left to measure: every backend failed its setup")
        load = os.getloadavg()
        plan = sweep_runner.sweep_targets(targets, procs)
        rows = bench_setup.run_with_progress(bench, plan, modes, options["trials"], note)
    finally:
        watcher.close()
    context = bench_setup.context_of(options, stamp, load, bench, targets)
    context.update(procs=procs, modes=modes, load_average_at_end=_load())
    context["problems"] = bench_report.problems(rows)
    del context["summary_file"]
    cells = sweep_report.summarize(rows)
    summary = Path(context["results_file"]).with_suffix(".md")
    summary.write_text(f"# {context['command']}\n\n{sweep_report.markdown(cells)}")
    context["summary_file"] = str(summary)
    return cells, context


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
