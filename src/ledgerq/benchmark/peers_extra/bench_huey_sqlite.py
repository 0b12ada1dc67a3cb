"""huey peer on SQLite (SqliteHuey: huey's SqliteStorage, its embedded store), for issue 29
item 7: ledgerq on SQLite against the peer that also runs on SQLite.

Not part of ledgerq: ``ledgerq bench`` copies this file next to the peers' harness.py
(benchmark/peers.py ``sync``) and runs it with the peers' venv, exactly like bench_huey.py.

Storage: one database file, ``huey_sqlite.db`` in the bench's scratch folder (beside ledgerq's
``ledgerq_bench.db``, so both sit on the same disk), with huey's defaults: WAL journal,
``synchronous`` left at SQLite's default (FULL: the WAL is fsynced at every commit),
``BEGIN EXCLUSIVE`` around each dequeue, a 5 s busy timeout. ``prefill`` (untimed, before a drain)
inserts the same rows in transactions of 1,000. A dequeue deletes the task's row
before the task runs: huey records no running state and no outcome of a task returning None.

Worker: ``huey_consumer bench_huey_sqlite.huey`` (one consumer that owns its workers).
drain/latency: -k process -w 2 (two processes, as ledgerq's two worker processes);
io: -k thread -w 16. huey has no bulk enqueue; Task.map() is a loop of single enqueues.
"""

import os
import time

import harness
from huey import SqliteHuey

NAME = "huey_sqlite"
BULK_LABEL = "task.map(x1000)  (loop of single enqueues; no bulk API)"
DB_PATH = os.environ.get(
    "BENCH_HUEY_SQLITE_DB", os.path.join(os.path.dirname(harness.HERE), "huey_sqlite.db")
)

huey = SqliteHuey("bench", filename=DB_PATH)


@huey.task()
def noop():
    harness.mark()


@huey.task()
def sleep10():
    time.sleep(harness.SLEEP_S)
    harness.mark()


@huey.task()
def lat(ts):
    harness.mark_lat(ts)


_T = {"noop": noop, "sleep": sleep10}


def setup():
    """Create the folder and huey's tables; report the settings every connection gets."""
    os.makedirs(os.path.dirname(DB_PATH) or ".", exist_ok=True)
    conn = huey.storage.conn
    names = ("journal_mode", "synchronous")
    pragmas = {p: conn.execute(f"pragma {p}").fetchone()[0] for p in names}
    return {"db": DB_PATH, **pragmas}


def reset():
    """Empty the queue, the schedule and the results (not timed)."""
    huey.flush()


def enqueue_single(kind, n):
    t = _T[kind]
    t0 = time.perf_counter()
    for _ in range(n):
        t()
    return time.perf_counter() - t0


def enqueue_bulk(kind, n):
    t = _T[kind]
    t0 = time.perf_counter()
    for c in harness.chunks(n):
        t.map([()] * c)
    return time.perf_counter() - t0


def prefill(kind, n):
    """Untimed: the same rows as ``enqueue_single`` (huey's own serialized messages), inserted
    in one transaction per 1,000, so 20,000 jobs take seconds instead of one fsync each and the
    drain run stays within the bench's per-run timeout."""
    t = _T[kind]
    storage = huey.storage
    for c in harness.chunks(n):
        rows = [(storage.name, storage.to_blob(huey.serialize_task(t.s())), 0) for _ in range(c)]
        with storage.db(commit=True) as curs:
            curs.executemany("insert into task (queue, data, priority) values (?, ?, ?)", rows)


def paced(rate, duration):
    return harness.paced_sync(lambda ts: lat(ts), rate, duration)


def worker_cmds(mode):
    base = ["huey_consumer", "bench_huey_sqlite.huey", "-q"]
    if mode == "io":
        return [[*base, "-k", "thread", "-w", "16"]]
    return [[*base, "-k", "process", "-w", "2"]]


if __name__ == "__main__":
    import bench_huey_sqlite

    harness.main(bench_huey_sqlite)
