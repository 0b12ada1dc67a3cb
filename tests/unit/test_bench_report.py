"""The pure parts of ``ledgerq bench``: parsing harness lines, medians, ratios and the shapes of
the tables and JSON (the targets: test_bench_targets.py). No timing is asserted anywhere: speed
is never a unit test."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ledgerq.benchmark import (
    BenchError,
    bench_cells,
    bench_ledgerq,
    bench_report,
    bench_runner,
    bench_tables,
)
from ledgerq.benchmark.bench_cells import METRIC_BY_KEY, Cell
from ledgerq.benchmark.bench_report import Report
from ledgerq.cli.commands import bench_cmd

LQ = "ledgerq_postgresql"
REDIS = "ledgerq_postgresql_redis"


def row(target: str, mode: str, trial: int = 1, **values: Any) -> dict[str, Any]:
    return {"target": target, "peer": target, "mode": mode, "trial": trial, **values}


def full_rows(
    target: str, scale: float = 1.0, p99: float = 5.0, p50: float = 2.0
) -> list[dict[str, Any]]:
    return [
        row(target, "enqueue_single", rate=1000 * scale),
        row(target, "enqueue_bulk", rate=50_000 * scale),
        row(target, "drain", rate_from_launch=6000 * scale, rate_first_to_last=7000 * scale),
        row(target, "io", rate_from_launch=1200 * scale, rate_first_to_last=1500 * scale),
        row(target, "latency", p50_ms=p50, p99_ms=p99, sent=2000, completed=2000),
    ]


# -- parsing -------------------------------------------------------------------------------


def test_parse_result_line_takes_the_last_json_object() -> None:
    stdout = 'App is instantiated\n{"old": 1}\nnoise {\n{"rate": 12.5, "peer": "rq"}\n\n'
    assert bench_report.parse_result_line(stdout) == {"rate": 12.5, "peer": "rq"}


@pytest.mark.parametrize("stdout", ["", "no json here\n", "{broken\n", "[1, 2]\n"])
def test_parse_result_line_without_an_object_is_none(stdout: str) -> None:
    assert bench_report.parse_result_line(stdout) is None


# -- cells ---------------------------------------------------------------------------------


def test_cell_is_the_median_of_the_trials() -> None:
    rows = [row("rq", "enqueue_single", t, rate=r) for t, r in ((1, 30.0), (2, 10.0), (3, 20.0))]
    cell = bench_report.summarize_cell(rows, METRIC_BY_KEY["enqueue_single"])
    assert cell == Cell(20.0, (30.0, 10.0, 20.0), "", (1, 2, 3))


def test_cell_falls_back_to_the_partial_rate() -> None:
    rows = [row("rq", "drain", n=20000, done=10900, partial_rate=114.0)]
    cell = bench_report.summarize_cell(rows, METRIC_BY_KEY["drain"])
    assert (cell.value, cell.note) == (114.0, "partial")


def test_cell_notes_skipped_errors_and_missing_runs() -> None:
    bulk = METRIC_BY_KEY["enqueue_bulk"]
    assert (
        bench_report.summarize_cell([row("arq", "enqueue_bulk", skipped="no")], bulk).note == "n/a"
    )
    assert bench_report.summarize_cell([], bulk).note == "not run"
    failed = bench_report.summarize_cell([row("x", "enqueue_bulk", error="Boom: no\ntrace")], bulk)
    assert (failed.value, failed.note) == (None, "error")


def test_problems_name_target_mode_trial_and_the_error_on_one_line() -> None:
    rows = [
        row(LQ, "drain", 2, error="RuntimeError: worker\n  exited rc=1"),
        row("rq", "io", rate_from_launch=1.0),
    ]
    assert bench_report.problems(rows) == [
        "ledgerq/postgresql drain (trial 2): RuntimeError: worker exited rc=1"
    ]


def test_cell_counts_failed_trials_and_ignores_nan() -> None:
    rows = [
        row("x", "enqueue_bulk", rate=10.0),
        row("x", "enqueue_bulk", rate=float("nan")),
        row("x", "enqueue_bulk", error="timeout"),
    ]
    cell = bench_report.summarize_cell(rows, METRIC_BY_KEY["enqueue_bulk"])
    assert cell.value == 10.0
    assert cell.note == "1 of 3 trials failed"


def test_latency_cell_flags_an_incomplete_run() -> None:
    rows = [row("x", "latency", p99_ms=3.0, sent=2000, completed=1990)]
    assert bench_report.summarize_cell(rows, METRIC_BY_KEY["latency_p99"]).note == "incomplete"


def test_latency_cell_flags_a_producer_that_fell_behind_the_pace() -> None:
    p99 = METRIC_BY_KEY["latency_p99"]
    slow = [row("x", "latency", p99_ms=3.0, sent=600, completed=600, producer_rate=62.7)]
    on_pace = [row("x", "latency", p99_ms=3.0, sent=600, completed=600, producer_rate=199.8)]
    assert bench_report.summarize_cell(slow, p99, lat_rate=200).note == "producer reached only 63/s"
    assert bench_report.summarize_cell(on_pace, p99, lat_rate=200).note == ""


def test_summarize_keeps_target_order_and_only_measured_modes() -> None:
    rows = [row(LQ, "drain", rate_from_launch=1.0), row("huey", "drain", rate_from_launch=2.0)]
    summary = bench_report.summarize(rows)
    assert list(summary) == [LQ, "huey"]
    assert set(summary[LQ]) == {"drain", "drain_first"}


# -- ratios --------------------------------------------------------------------------------


def test_throughput_ratio_is_ledgerq_over_peer() -> None:
    assert bench_cells.ratio(METRIC_BY_KEY["drain"], 6000.0, 3000.0) == 2.0


def test_latency_ratio_is_peer_over_ledgerq_so_above_one_is_better() -> None:
    assert bench_cells.ratio(METRIC_BY_KEY["latency_p99"], 2.0, 8.0) == 4.0


@pytest.mark.parametrize(("ours", "theirs"), [(None, 1.0), (1.0, None), (1.0, 0.0)])
def test_ratio_is_none_when_not_comparable(ours: float | None, theirs: float | None) -> None:
    assert bench_cells.ratio(METRIC_BY_KEY["enqueue_bulk"], ours, theirs) is None


def test_ratios_cover_peers_only() -> None:
    rows = full_rows(LQ) + full_rows("ledgerq_sqlite") + full_rows("pgqueuer", scale=0.5, p99=10.0)
    found = bench_report.ratios(bench_report.summarize(rows))
    assert list(found) == ["pgqueuer"]
    assert found["pgqueuer"]["drain"] == 2.0
    assert found["pgqueuer"]["latency_p99"] == 2.0


def test_ratios_by_target_cover_every_measured_ledgerq_target() -> None:
    rows = full_rows(REDIS, scale=1.6, p99=4.0) + full_rows(LQ) + full_rows("pgqueuer", 0.8, 8.0)
    found = bench_report.ratios_by_target(bench_report.summarize(rows))
    assert list(found) == [REDIS, LQ]
    assert list(found[REDIS]) == ["pgqueuer"]
    assert found[REDIS]["pgqueuer"]["drain"] == pytest.approx(9600 / 4800)
    assert found[REDIS]["pgqueuer"]["latency_p99"] == pytest.approx(8.0 / 4.0)
    assert found[LQ]["pgqueuer"]["drain"] == pytest.approx(6000 / 4800)
    assert found[LQ]["pgqueuer"]["latency_p99"] == pytest.approx(8.0 / 5.0)


def test_trial_ratios_pair_trial_i_with_trial_i() -> None:
    drain = METRIC_BY_KEY["drain"]
    ours = Cell(6.0, (4.0, 6.0, 9.0), "", (1, 2, 3))
    assert bench_cells.trial_ratios(drain, ours, Cell(3.0, (2.0, 3.0, 3.0), "", (1, 2, 3))) == [
        2.0,
        2.0,
        3.0,
    ]
    assert bench_cells.trial_ratios(drain, ours, Cell(2.0, (2.0, 3.0), "", (1, 2))) == []
    two = Cell(5.0, (4.0, 6.0), "", (1, 2))
    assert bench_cells.trial_ratios(drain, two, Cell(2.5, (2.0, 3.0), "", (1, 3))) == []


# -- rows of a Redis run, three trials (test_bench_targets.py uses them too) ---------------

# Per trial: drain (launch→last, 1st→last) jobs/s and latency (p50, p99) ms.
REDIS_DRAIN = ((4000.0, 5000.0), (4500.0, 5400.0), (5000.0, 6000.0))
PGQUEUER_DRAIN = ((3000.0, 3900.0), (3600.0, 4000.0), (4000.0, 4100.0))
DRAMATIQ_DRAIN = ((2500.0, 2600.0), (2000.0, 2700.0), (2600.0, 2800.0))
REDIS_LATENCY_MS = ((2.0, 4.0), (2.5, 4.5), (3.0, 6.0))
PGQUEUER_LATENCY_MS = ((3.0, 12.0), (3.5, 13.0), (4.0, 14.0))


def trial_rows(
    target: str, drain: tuple[tuple[float, float], ...], latency: tuple[tuple[float, float], ...]
) -> list[dict[str, Any]]:
    rows = [
        row(target, "drain", i, rate_from_launch=launch, rate_first_to_last=first)
        for i, (launch, first) in enumerate(drain, 1)
    ]
    rows += [
        row(target, "latency", i, p50_ms=p50, p99_ms=p99, sent=2000, completed=2000)
        for i, (p50, p99) in enumerate(latency, 1)
    ]
    return rows


def redis_only_rows() -> list[dict[str, Any]]:
    return (
        trial_rows(REDIS, REDIS_DRAIN, REDIS_LATENCY_MS)
        + trial_rows("pgqueuer", PGQUEUER_DRAIN, PGQUEUER_LATENCY_MS)
        + trial_rows("dramatiq", DRAMATIQ_DRAIN, PGQUEUER_LATENCY_MS)
    )


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
    assert list(data["ratios_by_target"]) == [LQ, "ledgerq_sqlite"]
    assert data["ratios_by_target"][LQ]["pgqueuer"]["drain"] == pytest.approx(1.25)
    assert data["ratios_by_target"]["ledgerq_sqlite"]["pgqueuer"]["drain"] == pytest.approx(0.625)
    # PostgreSQL: bulk and drain 1.25x pgqueuer met; p99 5.0 ms, io 93.8% / 75.0% missed.
    assert [t["met"] for t in data["targets"]] == [True] * 2 + [False] * 3 + [None] * 11
    assert [t["ledgerq"] for t in data["targets"]] == (
        [LQ] * 5 + [REDIS] * 8 + [REDIS + "_down"] + ["ledgerq_sqlite"] * 2
    )
    assert data["targets"][0]["threshold"] == 1.2 and not data["targets"][0]["informational"]
    assert [m["key"] for m in data["metrics"]][:2] == ["enqueue_single", "enqueue_bulk"]
    assert data["problems"] == ["arq drain (trial 1): RuntimeError: boom"]


def test_table_has_ledgerq_columns_then_peers_with_ratios() -> None:
    table = bench_tables.results_table(sample_report())
    headers = [str(c.header) for c in table.columns]
    assert headers == [
        "measurement",
        "unit",
        "ledgerq/postgresql",
        "ledgerq/sqlite",
        "pgqueuer",
        "arq",
    ]
    text = render(table)
    assert "4,800" in text and "n/a" in text
    assert "postgresql: 1.25x" in text and "sqlite: 0.62x" in text


def render(table: Any) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def test_terminal_tables_of_a_redis_only_run() -> None:
    found = Report.from_rows(redis_only_rows(), {"trials": 3})
    text = render(bench_tables.results_table(found))
    assert "4,500" in text and "3,600" in text and "1.25x" in text and "1.80x" in text
    assert "postgresql_redis:" not in text  # one ledgerq target: ratios need no name
    targets = render(bench_tables.targets_table(found))
    assert "ledgerq/postgresql_redis" in targets and "ledgerq/postgresql " in targets
    assert "1.25x (-22% vs 1.6x)" in targets and "MISSED" in targets


def test_markdown_has_figures_ratios_and_targets() -> None:
    text = bench_tables.markdown(sample_report())
    assert "| measurement | unit | ledgerq/postgresql | ledgerq/sqlite | pgqueuer | arq |" in text
    assert "| drain no-op, launch→last | 1.25x | - |" in text
    assert "| drain ≥ 1.2x pgqueuer (launch→last) | met | 1.25x (+4% vs 1.2x) |" in text
    assert text.count("'s ratio to each peer") == 2
    assert "ledgerq/sqlite's ratio to each peer" in text
    assert "| drain no-op, launch→last | 0.62x | - |" in text
    assert "| target (ledgerq/postgresql_redis) | result | measured | also |" in text
    assert text.endswith("Failed runs:\n\n- arq drain (trial 1): RuntimeError: boom\n")


def test_markdown_of_a_redis_only_run_shows_its_ratios_and_targets() -> None:
    text = bench_tables.markdown(Report.from_rows(redis_only_rows(), {"trials": 3}))
    assert "ledgerq/postgresql's ratio" not in text
    assert "ledgerq/postgresql_redis's ratio to each peer (above 1.00x" in text
    assert "| measurement | pgqueuer | dramatiq |" in text
    assert "| drain no-op, launch→last | 1.25x | 1.80x |" in text
    assert "| start latency p99 | 2.89x | 2.89x |" in text  # 13.0 ms ÷ 4.5 ms
    assert "| start latency p99 ≤ 3.0 ms (LISTEN/NOTIFY) | not measured | not measured |  |" in text
    assert (
        "| drain ≥ 2.5x dramatiq (Redis, launch→last) | MISSED | 1.80x (-28% vs 2.5x) "
        "| drain no-op, 1st→last: 2.00x; trials: 1.60x, 2.25x, 1.92x |"
    ) in text
    assert (
        "| start latency p99 ≤ 2.0 ms (Redis) | MISSED | 4.5 ms (2.5 ms over) | p50: 2.5 ms |"
        in text
    )


@pytest.mark.parametrize(
    ("metric", "value", "shown"),
    [("drain", 6637.4, "6,637"), ("latency_p99", 3.21, "3.2"), ("latency_p99", 4387.0, "4,387")],
)
def test_format_value(metric: str, value: float, shown: str) -> None:
    assert bench_tables.format_value(METRIC_BY_KEY[metric], value) == shown


# -- option parsing ------------------------------------------------------------------------


def test_only_accepts_aliases_and_keeps_run_order() -> None:
    assert bench_cmd.parse_modes("latency,bulk,drain") == ["enqueue_bulk", "drain", "latency"]
    assert bench_cmd.parse_modes(None) == [
        "enqueue_single",
        "enqueue_bulk",
        "drain",
        "io",
        "latency",
        "memory",
    ]
    assert bench_cmd.parse_modes("memory_drain,memory") == ["memory", "memory_drain"]


def test_unknown_options_are_one_line_errors() -> None:
    with pytest.raises(BenchError, match="unknown measurement"):
        bench_cmd.parse_modes("drain,speed")
    with pytest.raises(BenchError, match="unknown backend"):
        bench_cmd.parse_backends("oracle")
    with pytest.raises(BenchError, match="unknown peer"):
        bench_cmd.parse_peers("rq,kafka", False, ["rq", "huey"])


def test_backend_and_peer_parsing() -> None:
    assert bench_cmd.parse_backends("pg,mariadb,sqlite") == ["postgresql", "mysql", "sqlite"]
    assert bench_cmd.parse_backends("redis,redis-down") == [
        "postgresql-redis",
        "postgresql-redis-down",
    ]
    assert bench_cmd.parse_peers(None, True, ["rq"]) == []
    assert bench_cmd.parse_peers("huey,rq,huey", False, ["rq", "huey"]) == ["huey", "rq"]


def test_overlapping_benches_are_refused(tmp_path: Path) -> None:
    lock = tmp_path / "bench_cmd.lock"
    with (
        bench_runner.exclusive(lock),
        pytest.raises(BenchError, match="another ledgerq bench is running"),
        bench_runner.exclusive(lock),
    ):
        pass
    with bench_runner.exclusive(lock):
        pass  # released on exit


def test_the_outage_backend_points_its_workers_at_a_closed_redis_port(tmp_path: Path) -> None:
    up = bench_runner.ledgerq_target("postgresql-redis", "postgresql://h/db", tmp_path)
    down = bench_runner.ledgerq_target("postgresql-redis-down", "postgresql://h/db", tmp_path)
    assert (up.key, down.key) == ("ledgerq_postgresql_redis", "ledgerq_postgresql_redis_down")
    assert up.env["LEDGERQ_REDIS_URL"] == bench_runner.BENCH_REDIS_URL
    assert down.env["LEDGERQ_REDIS_URL"] == bench_runner.OUTAGE_REDIS_URL
    assert down.env["BENCH_LEDGERQ_NAME"] == down.key  # its workers' logs keep apart
    host, port = "127.0.0.1", int(bench_runner.OUTAGE_REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect((host, port))  # nothing listens there: every Redis call fails at once


def test_the_pgbouncer_backend_runs_its_workers_in_pooler_mode(tmp_path: Path) -> None:
    assert bench_cmd.parse_backends("pgbouncer") == ["postgresql-pgbouncer"]
    target = bench_runner.ledgerq_target(
        "postgresql-pgbouncer", "postgresql://h:6432/db", tmp_path, "postgresql://h:5432/db"
    )
    assert target.key == "ledgerq_postgresql_pgbouncer"
    assert target.env["LEDGERQ_DATABASE_URL"] == "postgresql://h:6432/db"
    assert target.env["LEDGERQ_DB_POOLER"] == "pgbouncer"
    assert target.env["LEDGERQ_DATABASE_DIRECT_URL"] == "postgresql://h:5432/db"
    plain = bench_runner.ledgerq_target("postgresql", "postgresql://h:5432/db", tmp_path)
    assert "LEDGERQ_DB_POOLER" not in plain.env


def test_ledgerq_workers_run_unpinned_unless_the_pinned_target_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 judges the defaults a user gets (unpinned); ``--pinned`` adds pinned targets
    beside them, under their own key, on the same ledger."""
    plain = bench_runner.ledgerq_target("postgresql-redis", "postgresql://h/db", tmp_path)
    pinned = bench_runner.ledgerq_target(
        "postgresql-redis", "postgresql://h/db", tmp_path, pinned=True
    )
    assert (plain.key, pinned.key) == (
        "ledgerq_postgresql_redis",
        "ledgerq_postgresql_redis_pinned",
    )
    assert pinned.env["LEDGERQ_DATABASE_URL"] == plain.env["LEDGERQ_DATABASE_URL"]
    for target, flag in ((plain, "--no-pin-cpu"), (pinned, "--pin-cpu")):
        monkeypatch.setenv("BENCH_LEDGERQ_PIN_CPU", target.env["BENCH_LEDGERQ_PIN_CPU"])
        assert all(flag in argv for argv in bench_ledgerq.worker_cmds("drain"))
    monkeypatch.delenv("BENCH_LEDGERQ_PIN_CPU")
    assert all("--no-pin-cpu" in argv for argv in bench_ledgerq.worker_cmds("drain"))
