"""The process-count sweep of ``ledgerq bench --procs``: parsing, the CPU probe's /proc reading
and tallies, the per-cell medians and CPU per 1,000 jobs, and the table, Markdown and JSON
shapes. Speed is never asserted: these check the arithmetic and the plumbing only."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from ledgerq.benchmark import (
    BenchError,
    bench_ledgerq,
    bench_runner,
    cpu_probe,
    redis_memory,
    sweep_report,
    sweep_runner,
)
from ledgerq.benchmark.sweep_runner import PROCS_ENV, sweep_targets
from ledgerq.cli.commands import bench_sweep
from ledgerq.cli.main import main

PG, RD = "ledgerq_postgresql", "ledgerq_postgresql_redis"


def run_row(target: str, mode: str, procs: int, trial: int = 1, **values: Any) -> dict[str, Any]:
    base = {
        "target": target,
        "mode": mode,
        "procs": procs,
        "trial": trial,
        "n": 10_000,
        "complete": True,
        "rate_from_launch": 1000.0,
        "rate_first_to_last": 2000.0,
        "startup_s": 5.0,
        "seconds_from_launch": 10.0,
        "window_s": 12.0,
        "db_cpu_s": 2.5,
        "worker_cpu_s": 20.0,
        "redis_cpu_s": 0.5,
        "db_backends": 5 * procs,
    }
    return {**base, **values}


# -- parsing ---------------------------------------------------------------------------------


def test_procs_are_sorted_distinct_counts() -> None:
    assert sweep_report.parse_procs("16, 1,2,4,8,2") == [1, 2, 4, 8, 16]
    assert sweep_report.parse_procs("2") == [2]


@pytest.mark.parametrize("value", ["0", "1,x", "-1", "65", ",", "1.5"])
def test_bad_procs_are_one_line_errors(value: str) -> None:
    with pytest.raises(BenchError, match="--procs"):
        sweep_report.parse_procs(value)


def test_a_sweep_runs_drain_and_io_only() -> None:
    assert bench_sweep.sweep_modes(None) == ["drain", "io"]
    assert bench_sweep.sweep_modes("io") == ["io"]
    with pytest.raises(BenchError, match="drop latency"):
        bench_sweep.sweep_modes("drain,latency")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--procs", "0"], "--procs takes worker process counts"),
        (["--procs", "1,2", "--only", "latency"], "drop latency"),
        (["--procs", "1,2", "--peers", "rq"], "drop --peers"),
    ],
)
def test_sweep_options_fail_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", *argv]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_bench_module_reads_its_process_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_LEDGERQ_PROCS", raising=False)
    assert len(bench_ledgerq.worker_cmds("drain")) == bench_ledgerq.WORKER_PROCESSES == 2
    monkeypatch.setenv("BENCH_LEDGERQ_PROCS", "5")
    assert len(bench_ledgerq.worker_cmds("io")) == 5
    monkeypatch.setenv("BENCH_LEDGERQ_PROCS", "0")
    with pytest.raises(ValueError, match="BENCH_LEDGERQ_PROCS"):
        bench_ledgerq.worker_cmds("io")


def test_sweep_targets_run_every_target_at_every_count(tmp_path: Path) -> None:
    pg = bench_runner.ledgerq_target("postgresql", "postgresql://h/db", tmp_path)
    rd = bench_runner.ledgerq_target("postgresql-redis", "postgresql://h/db", tmp_path)
    plan = sweep_targets([pg, rd], [1, 4])
    assert [(t.key, t.env[PROCS_ENV], t.labels["procs"]) for t in plan] == [
        (PG, "1", 1),
        (RD, "1", 1),
        (PG, "4", 4),
        (RD, "4", 4),
    ]


# -- the CPU probe ---------------------------------------------------------------------------


def test_parse_stat_counts_fields_after_the_last_parenthesis() -> None:
    fields = ["S", "1", "4242", "7", *["0"] * 7, "150", "50", "30", "20", "0"]
    line = "123 (postgres: a) (b) " + " ".join(fields)
    stat = cpu_probe.parse_stat(line, ticks=100)
    assert stat.comm == "postgres: a) (b"
    assert stat.pgrp == 4242
    assert stat.cpu_seconds == pytest.approx(2.5)  # (150 + 50 + 30 + 20) ticks
    with pytest.raises(ValueError, match="stat"):
        cpu_probe.parse_stat("garbage")


def test_tally_counts_only_cpu_spent_inside_the_window() -> None:
    tally = cpu_probe.Tally()
    tally.see(1, 10.0, started=False)  # the producer's backend, before the workers
    tally.rebase()
    tally.see(1, 10.5, started=True)
    tally.see(2, 3.0, started=True)  # a worker's backend, born inside the window
    tally.see(2, 4.0, started=True)
    assert tally.total() == pytest.approx(0.5 + 4.0)


def test_redis_cpu_is_sys_plus_user() -> None:
    assert cpu_probe.redis_cpu_seconds({"used_cpu_sys": 1.5, "used_cpu_user": 2.0}) == 3.5


def test_the_probe_measures_a_real_worker_group(tmp_path: Path) -> None:
    pgids = tmp_path / "worker_pgids"
    pgids.write_text("")
    burn = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass"
    with cpu_probe.watching(pgids, cpu_probe.Sources()) as probe:
        worker = subprocess.Popen([sys.executable, "-c", burn], start_new_session=True)
        pgids.write_text(f"{worker.pid}\n")
        assert worker.wait(30) == 0
        deadline = time.monotonic() + 10
        while probe.readings() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    found = probe.readings()
    assert found is not None, "the probe never closed its window on the worker's exit"
    assert found.worker_cpu_s >= 0.2  # sampled up to 0.1 s before its exit: a floor
    assert found.db_cpu_s is None and found.redis_cpu_s is None
    assert found.window_s > 0


def test_the_runner_adds_labels_and_the_watch_fields(tmp_path: Path) -> None:
    script = 'import json, sys; print(json.dumps({"mode": sys.argv[1], "n": 1}))'
    target = bench_runner.Target("t", (sys.executable, "-c", script), labels={"procs": 3})
    calls: list[str] = []

    def watch(t: bench_runner.Target, pgids: Path) -> Any:
        calls.append(t.key)
        return _yielding(lambda: {"db_cpu_s": 1.25})

    runner = bench_runner.Runner(tmp_path, bench_runner.Sizes(), tmp_path / "r.jsonl", watch=watch)
    row = runner.run_all([target], ["drain"], 1)[0]
    assert (row["procs"], row["db_cpu_s"], row["mode"]) == (3, 1.25, "drain")
    assert runner.setup(target).get("db_cpu_s") is None  # setup is never watched
    assert calls == ["t"]


def _yielding(value: Any) -> Any:
    import contextlib

    @contextlib.contextmanager
    def ctx() -> Any:
        yield value

    return ctx()


# -- aggregation and output ------------------------------------------------------------------


def test_derive_gives_cpu_per_thousand_jobs_and_utilisation_while_jobs_ran() -> None:
    found = sweep_report.derive(run_row(PG, "drain", 2))
    assert found["db_cpu_per_1k"] == pytest.approx(0.25)  # 2.5 s / 10,000 jobs
    assert found["worker_cpu_per_1k"] == pytest.approx(2.0)
    assert found["redis_cpu_per_1k"] == pytest.approx(0.05)
    assert found["db_util_pct"] == pytest.approx(50.0)  # 2.5 s over the 5 s 1st->last


def test_an_unfinished_run_has_no_per_job_cpu() -> None:
    partial = run_row(PG, "drain", 2, complete=False, rate_from_launch=None)
    found = sweep_report.derive(partial)
    assert found["db_cpu_per_1k"] is None and found["rate_from_launch"] is None
    assert found["db_util_pct"] == pytest.approx(2.5 / 12 * 100)  # the workers' whole life


def test_summarize_takes_medians_and_orders_mode_procs_target() -> None:
    rows = [
        run_row(PG, "drain", 4, rate_from_launch=900.0),
        run_row(PG, "drain", 1, trial=1, rate_from_launch=100.0),
        run_row(PG, "drain", 1, trial=2, rate_from_launch=300.0),
        run_row(PG, "drain", 1, trial=3, error="boom", complete=False, rate_from_launch=None),
        run_row(RD, "drain", 1),
        run_row(RD, "io", 1),
    ]
    cells = sweep_report.summarize(rows)
    assert [(c.mode, c.procs, c.target) for c in cells] == [
        ("drain", 1, PG),
        ("drain", 1, RD),
        ("drain", 4, PG),
        ("io", 1, RD),
    ]
    first = cells[0]
    assert first.values["rate_from_launch"] == 200.0  # median of 100 and 300; the error dropped
    assert (first.trials, first.failed) == (3, 1)


def test_tables_markdown_and_json_show_every_cell() -> None:
    cells = sweep_report.summarize(
        [run_row(PG, "drain", 1), run_row(RD, "drain", 16), run_row(PG, "io", 2)]
    )
    tables = sweep_report.tables(cells, trials=1)
    assert [t.title for t in tables] == [
        "ledgerq bench --procs: drain (median of 1)",
        "ledgerq bench --procs: io (median of 1)",
    ]
    console = Console(file=io.StringIO(), width=220)
    console.print(tables[0])
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "ledgerq/postgresql_redis" in shown and "50%" in shown and "0.250" in shown
    md = sweep_report.markdown(cells)
    assert "| 16 | ledgerq/postgresql_redis | 1,000 | 2,000 | 0.250 | 50% |" in md
    doc = json.loads(json.dumps(sweep_report.as_json(cells, {"procs": [1, 2, 16]})))
    assert doc["procs"] == [1, 2, 16]
    assert doc["sweep"][0] == {
        "mode": "drain",
        "procs": 1,
        "target": PG,
        "trials": 1,
        "failed": 0,
        "rate_from_launch": 1000.0,
        "rate_first_to_last": 2000.0,
        "db_cpu_per_1k": 0.25,
        "db_util_pct": 50.0,
        "worker_cpu_per_1k": 2.0,
        "redis_cpu_per_1k": 0.05,
        "db_backends": 5.0,
    }


# -- Redis memory per queued id (a private redis-server) -------------------------------------


def test_redis_memory_counts_the_ids_pushed_through_the_transport(redis_server: Any) -> None:
    found = redis_memory.measure(redis_server.url, 20_000)
    assert found["ids"] == 20_000 and found["encoding"] == "skiplist"
    # A 20-byte member, its score and the skiplist/dict links: tens of bytes, not kilobytes.
    assert 40 < found["bytes_per_id"] < 400
    client = redis_server.client()
    try:
        assert client.dbsize() == 0  # it deletes what it wrote
        client.set("someone-else", "1")
        with pytest.raises(BenchError, match="holds keys"):
            redis_memory.measure(redis_server.url, 10)
    finally:
        client.close()


def test_database_cpu_is_read_only_for_a_local_postgresql(tmp_path: Path) -> None:
    def url_of(backend: str, url: str, direct: str | None = None) -> str | None:
        target = bench_runner.ledgerq_target(backend, url, tmp_path, direct)
        found = sweep_runner.ledger_url(target)
        return None if found is None else found.render_as_string()

    assert url_of("postgresql", "postgresql://u@127.0.0.1:5440/b") == (
        "postgresql://u@127.0.0.1:5440/b"
    )
    assert url_of("postgresql", "postgresql://u@db.internal/b") is None  # pids of another host
    assert url_of("mysql", "mariadb://root@127.0.0.1/b") is None
    behind = url_of(
        "postgresql-pgbouncer", "postgresql://u@127.0.0.1:6432/b", "postgresql://u@localhost/b"
    )
    assert behind == "postgresql://u@localhost/b"  # the server's backends, not PgBouncer's
