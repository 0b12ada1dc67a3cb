"""Throughput of the SQL enqueue contract beside Python's producer (docs/benchmarks.md):
``ledgerq_enqueue`` called N times in one transaction and once per transaction, against
``Task.enqueue_many`` and one-by-one ``Task.enqueue``, on fresh PostgreSQL and MariaDB ledgers.
Not a test (no timing is ever asserted); run it by hand:

    .venv/bin/python -m tests.producers.bench_sql_enqueue [--n 10000] [--trials 3]
        [--backends postgresql,mysql] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ
from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from tests.conftest import fresh_database_url

TASK = "bench.noop"


def _timed(run: Callable[[], None], n: int) -> float:
    started = time.perf_counter()
    run()
    return n / (time.perf_counter() - started)


def _sql_calls(url: str, n: int, *, per_transaction: bool) -> float:
    engine = create_engine(url)
    raw: Any = engine.raw_connection()
    postgres = engine.dialect.name == "postgresql"
    call = (
        "SELECT ledgerq_enqueue(%s, CAST(%s AS json))"
        if postgres
        else "CALL ledgerq_enqueue(%s, %s, 'default', NULL, @ledgerq_job_id)"
    )

    def run() -> None:
        cursor = raw.cursor()
        for i in range(n):
            cursor.execute(call, (TASK, f"[{i}]"))
            if not postgres:
                cursor.execute("SELECT @ledgerq_job_id")
            cursor.fetchall()
            if per_transaction:
                raw.commit()
        raw.commit()
        cursor.close()

    try:
        return _timed(run, n)
    finally:
        raw.close()
        engine.dispose()


def _sql_one_statement(url: str, n: int) -> float | None:
    # PostgreSQL only: a set-based call, the SQL producer's bulk path (MariaDB cannot CALL a
    # procedure per row of a query).
    engine = create_engine(url)
    if engine.dialect.name != "postgresql":
        engine.dispose()
        return None
    stmt = sa.text(
        "SELECT count(ledgerq_enqueue(:task, json_build_array(i))) FROM generate_series(1, :n) AS i"
    )

    def run() -> None:
        with engine.begin() as conn:
            assert conn.execute(stmt, {"task": TASK, "n": n}).scalar_one() == n

    try:
        return _timed(run, n)
    finally:
        engine.dispose()


def _python(url: str, n: int, *, many: bool) -> float:
    app = LedgerQ(database_url=url)

    @app.task(name=TASK)
    def noop(ctx: JobContext, i: int) -> None:
        """Never run: only enqueued."""

    def run() -> None:
        if many:
            noop.enqueue_many([(i,) for i in range(n)])
        else:
            for i in range(n):
                noop.enqueue(i)

    try:
        return _timed(run, n)
    finally:
        app.close()


CELLS: dict[str, Callable[[str, int], float | None]] = {
    "sql function, one statement": _sql_one_statement,
    "sql function, one transaction": lambda u, n: _sql_calls(u, n, per_transaction=False),
    "sql function, one per transaction": lambda u, n: _sql_calls(u, n, per_transaction=True),
    "python enqueue_many": lambda u, n: _python(u, n, many=True),
    "python enqueue, one by one": lambda u, n: _python(u, n, many=False),
}


def measure(backend: str, n: int, scratch: Path, trials: int) -> dict[str, float | None]:
    """Median jobs per second of each cell over ``trials``, each trial on a fresh migrated
    ledger of ``backend`` (None: the cell does not apply to it)."""
    rates: dict[str, float | None] = {}
    for name, cell in CELLS.items():
        runs = [_trial(cell, backend, n, scratch) for _ in range(trials)]
        rates[name] = None if None in runs else statistics.median(r for r in runs if r)
    return rates


def _trial(
    cell: Callable[[str, int], float | None], backend: str, n: int, scratch: Path
) -> float | None:
    generator = fresh_database_url(backend, scratch)
    url = next(generator)
    try:
        engine = create_engine(url)
        migrate(engine)
        engine.dispose()
        return cell(url, n)
    finally:
        next(generator, None)


def main() -> None:
    """Print a table (or ``--json``) of jobs/s per backend and cell."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--backends", default="postgresql,mysql")
    parser.add_argument("--trials", type=int, default=1, help="the table shows the median")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        results = {
            b: measure(b, options.n, Path(scratch), options.trials)
            for b in options.backends.split(",")
        }
    if options.json:
        print(json.dumps({"n": options.n, "jobs_per_second": results}))
        return
    print(f"| producer ({options.n:,} jobs) | " + " | ".join(results) + " |")
    print("|---|" + "---:|" * len(results))
    for cell in CELLS:
        rates = [results[b][cell] for b in results]
        print(f"| {cell} | " + " | ".join(f"{r:,.0f}/s" if r else "n/a" for r in rates) + " |")


if __name__ == "__main__":
    main()
