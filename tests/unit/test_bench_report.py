"""The pure parts of ``ledgerq bench``: parsing harness lines, medians, ratios, targets and the
shapes of the table and JSON. No timing is asserted anywhere: speed is never a unit test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ledgerq.benchmark import BenchError, report, runner, tables
from ledgerq.benchmark.report import METRIC_BY_KEY, Cell, Report
from ledgerq.cli.commands import bench

LQ = "ledgerq_postgresql"


def row(target: str, mode: str, trial: int = 1, **values: Any) -> dict[str, Any]:
    return {"target": target, "peer": target, "mode": mode, "trial": trial, **values}


def full_rows(target: str, scale: float = 1.0, p99: float = 5.0) -> list[dict[str, Any]]:
    return [
        row(target, "enqueue_single", rate=1000 * scale),
        row(target, "enqueue_bulk", rate=50_000 * scale),
        row(target, "drain", rate_from_launch=6000 * scale, rate_first_to_last=7000 * scale),
        row(target, "io", rate_from_launch=1200 * scale, rate_first_to_last=1500 * scale),
        row(target, "latency", p50_ms=2.0, p99_ms=p99, sent=2000, completed=2000),
    ]


# -- parsing -------------------------------------------------------------------------------


def test_parse_result_line_takes_the_last_json_object() -> None:
    stdout = 'App is instantiated\n{"old": 1}\nnoise {\n{"rate": 12.5, "peer": "rq"}\n\n'
    assert report.parse_result_line(stdout) == {"rate": 12.5, "peer": "rq"}


@pytest.mark.parametrize("stdout", ["", "no json here\n", "{broken\n", "[1, 2]\n"])
def test_parse_result_line_without_an_object_is_none(stdout: str) -> None:
    assert report.parse_result_line(stdout) is None


# -- cells ---------------------------------------------------------------------------------


def test_cell_is_the_median_of_the_trials() -> None:
    rows = [row("rq", "enqueue_single", t, rate=r) for t, r in ((1, 30.0), (2, 10.0), (3, 20.0))]
    cell = report.summarize_cell(rows, METRIC_BY_KEY["enqueue_single"])
    assert cell == Cell(20.0, (30.0, 10.0, 20.0), "")


def test_cell_falls_back_to_the_partial_rate() -> None:
    rows = [row("rq", "drain", n=20000, done=10900, partial_rate=114.0)]
    cell = report.summarize_cell(rows, METRIC_BY_KEY["drain"])
    assert (cell.value, cell.note) == (114.0, "partial")


def test_cell_notes_skipped_errors_and_missing_runs() -> None:
    bulk = METRIC_BY_KEY["enqueue_bulk"]
    assert report.summarize_cell([row("arq", "enqueue_bulk", skipped="no")], bulk).note == "n/a"
    assert report.summarize_cell([], bulk).note == "not run"
    failed = report.summarize_cell([row("x", "enqueue_bulk", error="Boom: no\ntrace")], bulk)
    assert (failed.value, failed.note) == (None, "error")


def test_problems_name_target_mode_trial_and_the_error_on_one_line() -> None:
    rows = [
        row(LQ, "drain", 2, error="RuntimeError: worker\n  exited rc=1"),
        row("rq", "io", rate_from_launch=1.0),
    ]
    assert report.problems(rows) == [
        "ledgerq/postgresql drain (trial 2): RuntimeError: worker exited rc=1"
    ]


def test_cell_counts_failed_trials_and_ignores_nan() -> None:
    rows = [
        row("x", "enqueue_bulk", rate=10.0),
        row("x", "enqueue_bulk", rate=float("nan")),
        row("x", "enqueue_bulk", error="timeout"),
    ]
    cell = report.summarize_cell(rows, METRIC_BY_KEY["enqueue_bulk"])
    assert cell.value == 10.0
    assert cell.note == "1 of 3 trials failed"


def test_latency_cell_flags_an_incomplete_run() -> None:
    rows = [row("x", "latency", p99_ms=3.0, sent=2000, completed=1990)]
    assert report.summarize_cell(rows, METRIC_BY_KEY["latency_p99"]).note == "incomplete"


def test_latency_cell_flags_a_producer_that_fell_behind_the_pace() -> None:
    p99 = METRIC_BY_KEY["latency_p99"]
    slow = [row("x", "latency", p99_ms=3.0, sent=600, completed=600, producer_rate=62.7)]
    on_pace = [row("x", "latency", p99_ms=3.0, sent=600, completed=600, producer_rate=199.8)]
    assert report.summarize_cell(slow, p99, lat_rate=200).note == "producer reached only 63/s"
    assert report.summarize_cell(on_pace, p99, lat_rate=200).note == ""


def test_summarize_keeps_target_order_and_only_measured_modes() -> None:
    rows = [row(LQ, "drain", rate_from_launch=1.0), row("huey", "drain", rate_from_launch=2.0)]
    summary = report.summarize(rows)
    assert list(summary) == [LQ, "huey"]
    assert set(summary[LQ]) == {"drain", "drain_first"}


# -- ratios --------------------------------------------------------------------------------


def test_throughput_ratio_is_ledgerq_over_peer() -> None:
    assert report.ratio(METRIC_BY_KEY["drain"], 6000.0, 3000.0) == 2.0


def test_latency_ratio_is_peer_over_ledgerq_so_above_one_is_better() -> None:
    assert report.ratio(METRIC_BY_KEY["latency_p99"], 2.0, 8.0) == 4.0


@pytest.mark.parametrize(("ours", "theirs"), [(None, 1.0), (1.0, None), (1.0, 0.0)])
def test_ratio_is_none_when_not_comparable(ours: float | None, theirs: float | None) -> None:
    assert report.ratio(METRIC_BY_KEY["enqueue_bulk"], ours, theirs) is None


def test_ratios_cover_peers_only() -> None:
    rows = full_rows(LQ) + full_rows("ledgerq_sqlite") + full_rows("pgqueuer", scale=0.5, p99=10.0)
    found = report.ratios(report.summarize(rows))
    assert list(found) == ["pgqueuer"]
    assert found["pgqueuer"]["drain"] == 2.0
    assert found["pgqueuer"]["latency_p99"] == 2.0


# -- targets -------------------------------------------------------------------------------


def targets_of(rows: list[dict[str, Any]]) -> dict[str, report.TargetResult]:
    return {t.name.split()[0]: t for t in Report.from_rows(rows).targets}


def test_targets_met_with_margins() -> None:
    found = targets_of(full_rows(LQ) + full_rows("pgqueuer", scale=0.8))
    assert all(t.met for t in found.values())
    assert found["drain"].margin == "1.25x (+25%)"
    assert found["drain"].detail == "drain no-op, 1st→last: 1.25x"
    assert found["io"].margin == "1,500 jobs/s = 93.8% (+3.8 points)"
    assert found["start"].margin == "5.0 ms (5.0 ms under)"


def test_targets_missed_with_margins() -> None:
    rows = full_rows(LQ, scale=0.5, p99=12.5) + full_rows("pgqueuer")
    found = targets_of(rows)
    assert not any(t.met for t in found.values())
    assert found["bulk"].margin == "0.50x (-50%)"
    assert found["io"].margin == "750 jobs/s = 46.9% (-43.1 points)"
    assert found["start"].margin == "12.5 ms (2.5 ms over)"


def test_ratio_targets_without_pgqueuer_are_not_measured() -> None:
    found = targets_of(full_rows(LQ))
    assert found["drain"].met is None
    assert found["bulk"].met is None
    assert found["io"].met is True


def test_io_target_at_exactly_90_percent_is_met() -> None:
    rows = [row(LQ, "io", rate_from_launch=1000.0, rate_first_to_last=1440.0)]
    assert targets_of(rows)["io"].met is True


# -- shapes --------------------------------------------------------------------------------


def sample_report() -> Report:
    rows = full_rows(LQ) + full_rows("ledgerq_sqlite", 0.5) + full_rows("pgqueuer", 0.8)
    rows.append(row("arq", "enqueue_bulk", skipped="no bulk API"))
    rows.append(row("arq", "drain", error="RuntimeError: boom"))
    return Report.from_rows(rows, {"trials": 1, "command": "ledgerq bench"})


def test_json_has_results_ratios_and_targets() -> None:
    data = json.loads(json.dumps(sample_report().as_json()))
    assert data["reference"] == LQ
    assert data["command"] == "ledgerq bench"
    assert data["results"]["pgqueuer"]["drain"]["value"] == 4800.0
    assert data["results"]["arq"]["enqueue_bulk"]["note"] == "n/a"
    assert data["ratios"]["pgqueuer"]["drain"] == pytest.approx(1.25)
    assert [t["met"] for t in data["targets"]] == [True, True, True, True]
    assert [m["key"] for m in data["metrics"]][:2] == ["enqueue_single", "enqueue_bulk"]
    assert data["problems"] == ["arq drain (trial 1): RuntimeError: boom"]


def test_table_has_ledgerq_columns_then_peers_with_ratios() -> None:
    table = tables.results_table(sample_report())
    headers = [str(c.header) for c in table.columns]
    assert headers == [
        "measurement",
        "unit",
        "ledgerq/postgresql",
        "ledgerq/sqlite",
        "pgqueuer",
        "arq",
    ]
    console = Console(width=200, record=True)
    console.print(table)
    text = console.export_text()
    assert "4,800" in text and "1.25x" in text and "n/a" in text


def test_markdown_has_figures_ratios_and_targets() -> None:
    text = tables.markdown(sample_report())
    assert "| measurement | unit | ledgerq/postgresql | ledgerq/sqlite | pgqueuer | arq |" in text
    assert "| drain no-op, launch→last | 1.25x | - |" in text
    assert "| drain ≥ 1.0x pgqueuer (launch→last) | met | 1.25x (+25%) |" in text
    assert text.endswith("Failed runs:\n\n- arq drain (trial 1): RuntimeError: boom\n")


@pytest.mark.parametrize(
    ("metric", "value", "shown"),
    [("drain", 6637.4, "6,637"), ("latency_p99", 3.21, "3.2"), ("latency_p99", 4387.0, "4,387")],
)
def test_format_value(metric: str, value: float, shown: str) -> None:
    assert tables.format_value(METRIC_BY_KEY[metric], value) == shown


# -- option parsing ------------------------------------------------------------------------


def test_only_accepts_aliases_and_keeps_run_order() -> None:
    assert bench.parse_modes("latency,bulk,drain") == ["enqueue_bulk", "drain", "latency"]
    assert bench.parse_modes(None) == ["enqueue_single", "enqueue_bulk", "drain", "io", "latency"]


def test_unknown_options_are_one_line_errors() -> None:
    with pytest.raises(BenchError, match="unknown measurement"):
        bench.parse_modes("drain,speed")
    with pytest.raises(BenchError, match="unknown backend"):
        bench.parse_backends("oracle")
    with pytest.raises(BenchError, match="unknown peer"):
        bench.parse_peers("rq,kafka", False, ["rq", "huey"])


def test_backend_and_peer_parsing() -> None:
    assert bench.parse_backends("pg,mariadb,sqlite") == ["postgresql", "mysql", "sqlite"]
    assert bench.parse_peers(None, True, ["rq"]) == []
    assert bench.parse_peers("huey,rq,huey", False, ["rq", "huey"]) == ["huey", "rq"]


def test_overlapping_benches_are_refused(tmp_path: Path) -> None:
    lock = tmp_path / "bench.lock"
    with (
        runner.exclusive(lock),
        pytest.raises(BenchError, match="another ledgerq bench is running"),
        runner.exclusive(lock),
    ):
        pass
    with runner.exclusive(lock):
        pass  # released on exit
