"""``ledgerq worker start --processes N`` with real worker processes: a SIGKILLed child is
replaced within 2 s and its job failed over; SIGTERM to the manager stops every child
gracefully with nothing lost; ``--max-jobs`` recycles children without losing a job."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgerq.core.fleet import WorkerState
from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.test_failover import FLEET_ENV, Fleet
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

Make = Callable[[str], Ledger]


def children(pid: int) -> set[int]:
    """Pids of ``pid``'s child processes (Linux)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return {int(p) for p in text.split()}


def test_manager_restarts_a_killed_child_and_stops_gracefully(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        manager = procs.worker(
            db.url,
            "--processes",
            "2",
            "--concurrency",
            "1",
            "--prefetch",
            "0",
            "--grace",
            "5",
            env=FLEET_ENV,
        )
        wait_until(lambda: len(fleet.active()) == 2, timeout=30, what="two children registered")
        assert set(fleet.active()) == children(manager.pid)
        ids = [
            db.effects.slow.enqueue(f"k{i}", 60.0 if i == 0 else 0.5, 0.05, max_attempts=3).job_id
            for i in range(4)
        ]
        wait_until(
            lambda: db.jobs()[ids[0]].state == "running", timeout=30, what="the long job started"
        )
        holder = db.jobs()[ids[0]].worker_id
        victim = next(pid for pid, wid in fleet.active().items() if wid == holder)
        before = children(manager.pid)
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        replaced = wait_until(
            lambda: children(manager.pid) - before, timeout=10, what="a replacement child"
        )
        took = time.monotonic() - killed_at
        assert took <= 2.0, f"replacement started after {took:.2f} s"
        assert len(replaced) == 1 and victim not in children(manager.pid)
        wait_until(
            lambda: set(fleet.active()) == children(manager.pid),
            timeout=30,
            what="the replacement registered",
        )
        # The killed child's job fails over and finishes (its rerun is short).
        wait_until(lambda: set(db.states()) == {"succeeded"}, timeout=30, what="every job finished")
        assert db.jobs()[ids[0]].attempt == 2
        # SIGTERM to the manager: children stop gracefully; a job in flight finishes.
        late = db.effects.slow.enqueue("late", 1.0).job_id
        wait_until(lambda: db.jobs()[late].state == "running", timeout=30, what="late started")
        manager.signal(signal.SIGTERM)
        assert manager.wait(30) == 0, manager.log()
        assert db.states() == {"succeeded": 5}
        assert db.duplicate_rows() == []
        states = {w.worker_id: w.state for w in fleet.admin.list_workers(include_inactive=True)}
        assert states.pop(str(holder)) is WorkerState.DEAD
        assert set(states.values()) == {WorkerState.STOPPED} and len(states) == 2, (
            states,
            manager.log(),
        )
        assert "worker process crashed; restarting" in manager.log()
    finally:
        fleet.close()


def test_max_jobs_recycles_children_without_losing_a_job(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    keys = {f"r{i}" for i in range(20)}
    db.effects.record_effect.enqueue_many([(k,) for k in sorted(keys)])
    manager = procs.worker(
        db.url,
        "--processes",
        "1",
        "--max-jobs",
        "5",
        "--prefetch",
        "0",
        "--burst",
        env=FLEET_ENV,
    )
    assert manager.wait(120) == 0, manager.log()
    assert db.states() == {"succeeded": 20}
    assert set(db.effect_rows()) == keys and db.duplicate_rows() == []
    workers = {row.worker_id for row in db.jobs().values()}
    assert len(workers) >= 4  # at most 5 jobs per child process
    assert manager.log().count("worker process recycled") >= 3


def test_each_managed_child_gets_its_own_health_port(ledger: Make, procs: Procs) -> None:
    import http.client
    import urllib.request

    from tests.redis_server import free_port_run

    db = ledger("sqlite")
    port = free_port_run(2)
    manager = procs.worker(db.url, "--processes", "2", "--health-port", str(port), env=FLEET_ENV)

    def live(p: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{p}/health/live", timeout=2) as r:
                return r.status == 200
        # HTTPException: before the child listens, a connect to an ephemeral-range port can
        # land on itself (TCP self-connect) and read its own request back.
        except (OSError, http.client.HTTPException):
            return False

    wait_until(lambda: live(port) and live(port + 1), timeout=30, what="both children serve")
    assert len(children(manager.pid)) == 2
    manager.signal(signal.SIGTERM)
    assert manager.wait(60) == 0, manager.log()[-2000:]


#: A TTL far above the recovery a manager-seen crash must give (the fleet's own failover
#: would take up to 30 s + one check).
LONG_TTL_ENV = {
    "LEDGERQ_HEARTBEAT_INTERVAL": "1",
    "LEDGERQ_WORKER_TTL": "30",
    "LEDGERQ_FAILOVER_CHECK_INTERVAL": "5",
}


def test_a_child_the_manager_sees_crash_is_failed_over_at_once(ledger: Make, procs: Procs) -> None:
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        manager = procs.worker(
            db.url,
            "--processes",
            "2",
            "--concurrency",
            "2",
            "--prefetch",
            "0",
            "--grace",
            "5",
            env=LONG_TTL_ENV,
        )
        wait_until(lambda: len(fleet.active()) == 2, timeout=30, what="two children registered")
        # 8 s on the first attempt (the victim's are killed), 0.05 s on the rerun.
        ids = [db.effects.slow.enqueue(f"m{i}", 8.0, 0.05, max_attempts=3).job_id for i in range(4)]
        wait_until(
            lambda: all(db.jobs()[i].state == "running" for i in ids),
            timeout=30,
            what="every job running",
        )
        holders = {i: db.jobs()[i].worker_id for i in ids}
        victim_id = next(iter(holders.values()))
        victim = next(pid for pid, wid in fleet.active().items() if wid == victim_id)
        held = {i for i, wid in holders.items() if wid == victim_id}
        killed_at = time.monotonic()
        os.kill(victim, signal.SIGKILL)

        def back() -> bool:
            rows = db.jobs()
            return all(rows[i].state != "running" or rows[i].attempt == 2 for i in held)

        wait_until(back, timeout=25, what="the killed child's jobs put back")
        took = time.monotonic() - killed_at
        assert took <= 3.0, f"the killed child's jobs came back after {took:.2f} s (TTL 30 s)"
        events = fleet.admin.list_failover_events()
        assert [e["worker_id"] for e in events] == [victim_id]
        assert events[0]["detected_by"].startswith("manager ")
        assert "SIGKILL" in events[0]["detected_by"]
        assert sorted(events[0]["job_ids"]["requeued"]) == sorted(held)
        wait_until(lambda: set(db.states()) == {"succeeded"}, timeout=60, what="every job done")
        assert all(db.jobs()[i].attempt == 2 for i in held)
        assert db.duplicate_rows() == []
        assert len(db.effect_rows()) == 4
        manager.signal(signal.SIGTERM)
        assert manager.wait(30) == 0, manager.log()[-3000:]
        print(f"manager-seen crash: jobs back after {took:.2f} s")
    finally:
        fleet.close()


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def test_children_of_a_killed_manager_stop_and_put_their_jobs_back(
    ledger: Make, procs: Procs
) -> None:
    """A manager killed with SIGKILL cannot stop its children; they notice they were orphaned
    and stop gracefully, putting back what they held (before, they ran on unsupervised)."""
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        manager = procs.worker(
            db.url, "--processes", "2", "--concurrency", "1", "--grace", "1", env=FLEET_ENV
        )
        wait_until(lambda: len(fleet.active()) == 2, timeout=30, what="two children registered")
        kids = children(manager.pid)
        ids = [db.effects.yielding.enqueue(f"y{i}", 60.0).job_id for i in range(2)]
        wait_until(
            lambda: all(db.jobs()[i].state == "running" for i in ids), timeout=30, what="running"
        )
        manager.popen.kill()
        manager.popen.wait()
        wait_until(
            lambda: not any(pid_alive(pid) for pid in kids),
            timeout=15,
            what="the orphaned children stopped",
        )
        assert {db.jobs()[i].state for i in ids} == {"queued"}
        assert fleet.active() == {}
    finally:
        fleet.close()


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def started_as(method: str, manager_pid: int) -> bool:
    """Whether every child of the manager was started by ``method``: a fork runs the
    manager's own command line; an exec'd child is a fresh ``python -m ledgerq.cli.main``
    without the manager's options."""
    for pid in children(manager_pid):
        argv = cmdline(pid)
        if method == "fork" and argv != cmdline(manager_pid):
            return False
        fresh = argv[1:3] == ["-m", "ledgerq.cli.main"] and argv[-1] == "--managed"
        if method == "exec" and not (fresh and "--processes" not in argv):
            return False
    return True


@pytest.mark.parametrize("method", ["fork", "exec"])
def test_children_and_their_replacements_start_by_the_method_and_fail_over(
    method: str, ledger: Make, procs: Procs
) -> None:
    # Forked (the default on Linux), a child starts with the manager's imports done. After
    # each crash the manager fails the child over on connections of its own and closes them,
    # then starts the replacement: the replacement works, and so does the manager's failover
    # of the next crash.
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    options = ("--start-method", "exec") if method == "exec" else ()
    try:
        manager = procs.worker(
            db.url,
            *("--processes", "2", "--concurrency", "2", "--grace", "5", *options),
            env=LONG_TTL_ENV,
        )
        wait_until(lambda: len(fleet.active()) == 2, timeout=30, what="two children registered")
        assert started_as(method, manager.pid)
        for crash in (1, 2):
            before = set(fleet.active())
            os.kill(min(before), signal.SIGKILL)
            failed_over = crash

            def recorded(count: int = failed_over) -> bool:
                return len(fleet.admin.list_failover_events()) == count

            def replaced(old: set[int] = before) -> bool:
                active = set(fleet.active())
                return len(active - old) == 1 and len(active) == 2

            wait_until(recorded, timeout=10, what=f"the manager's failover of crash {crash}")
            wait_until(replaced, timeout=30, what=f"the replacement of crash {crash} registered")
        events = fleet.admin.list_failover_events()
        assert all(e["detected_by"].startswith("manager ") for e in events), events
        assert started_as(method, manager.pid)
        ids = [db.effects.slow.enqueue(f"f{i}", 0.05).job_id for i in range(6)]
        wait_until(lambda: set(db.states()) == {"succeeded"}, timeout=30, what="every job done")
        assert len(db.effect_rows()) == len(ids) and db.duplicate_rows() == []
        manager.signal(signal.SIGTERM)
        assert manager.wait(30) == 0, manager.log()[-3000:]
        log = manager.log()
        # Only the two children killed here crashed, and no child lost a connection to one
        # of the manager's (a child using the manager's pool breaks both sessions).
        assert log.count("worker process crashed; restarting") == 2, log[-3000:]
        assert "closed the connection" not in log and "unavailable" not in log, log[-3000:]
        assert log.count(f"start={method}") == 4, log[-3000:]
    finally:
        fleet.close()
