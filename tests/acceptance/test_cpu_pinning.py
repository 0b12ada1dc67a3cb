"""``worker start --pin-cpu``: each worker process on a host takes a CPU of its own (every
thread of it pinned there), a worker that finds every CPU taken runs unpinned, and a killed
worker's CPU is free again. Real processes; each test has its own lock folder (``TMPDIR``)."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from ledgerq.runtime.affinity import LOCK_FOLDER
from tests.acceptance.conftest import Ledger, Procs
from tests.helpers import wait_until

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

Make = Callable[[str], Ledger]

#: The first test starts a worker per CPU and one more; past this many CPUs that is too heavy.
MOST_CPUS = 8

pytestmark = pytest.mark.skipif(
    len(ALLOWED) < 2, reason="pinning needs Linux CPU affinity and at least two CPUs"
)


def cpus_of(pid: int) -> dict[int, set[int]]:
    """The CPUs each thread of ``pid`` may run on, by thread id."""
    cpus: dict[int, set[int]] = {}
    for name in os.listdir(Path(f"/proc/{pid}/task")):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            cpus[int(name)] = os.sched_getaffinity(int(name))
    return cpus


def pinned_cpu(pid: int) -> int | None:
    """The one CPU every thread of ``pid`` is pinned to, or None if they are not."""
    per_thread = set(map(frozenset, cpus_of(pid).values()))
    if len(per_thread) != 1:
        return None
    (cpus,) = per_thread
    return next(iter(cpus)) if len(cpus) == 1 else None


@pytest.mark.skipif(
    len(ALLOWED) > MOST_CPUS, reason=f"more than {MOST_CPUS} CPUs: a worker each is too many"
)
def test_each_pinned_worker_takes_its_own_cpu_and_a_killed_ones_cpu_is_free_again(
    ledger: Make, procs: Procs, tmp_path: Path
) -> None:
    db = ledger("sqlite")
    env = {"TMPDIR": str(tmp_path)}
    workers = [procs.worker(db.url, "--pin-cpu", env=env) for _ in ALLOWED]
    for w in workers:
        wait_until(lambda w=w: "worker starting" in w.log(), timeout=30, what="worker start")
    # Only now the one worker too many (started with the others, it could win a CPU first).
    extra = procs.worker(db.url, "--pin-cpu", env=env)
    unpinned = procs.worker(db.url, env=env)  # the default: off
    for w in (extra, unpinned):
        wait_until(lambda w=w: "worker starting" in w.log(), timeout=30, what="worker start")

    def pinned() -> list[int | None]:
        return [pinned_cpu(w.pid) for w in workers]

    assert set(pinned()) == set(ALLOWED), [w.log()[-2000:] for w in workers]  # one CPU each
    assert all(len(cpus) > 1 for cpus in cpus_of(extra.pid).values())
    assert "could not pin to a CPU" in extra.log()
    assert all(len(cpus) > 1 for cpus in cpus_of(unpinned.pid).values())
    assert (tmp_path / f"{LOCK_FOLDER}-{os.getuid()}").is_dir()  # per user, private

    # Every thread of a pinned worker runs its jobs on that CPU: the jobs still run.
    db.effects.noop.enqueue_many([(n, 0.0) for n in range(200)])
    wait_until(lambda: db.states() == {"succeeded": 200}, timeout=60, what="jobs done")
    assert set(pinned()) == set(ALLOWED)  # threads started for the jobs are pinned too

    killed = workers[0]
    freed = pinned_cpu(killed.pid)
    killed.signal(signal.SIGKILL)
    assert killed.wait(10) == -signal.SIGKILL
    successor = procs.worker(db.url, "--pin-cpu", env=env)
    wait_until(lambda: "worker starting" in successor.log(), timeout=30, what="successor start")
    assert pinned_cpu(successor.pid) == freed
    for w in [*workers[1:], extra, unpinned, successor]:
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.log()[-2000:]


def test_the_setting_pins_and_the_flag_overrides_it(
    ledger: Make, procs: Procs, tmp_path: Path
) -> None:
    db = ledger("sqlite")
    env = {"TMPDIR": str(tmp_path), "LEDGERQ_PIN_CPU": "true"}
    by_setting = procs.worker(db.url, env=env)
    overridden = procs.worker(db.url, "--no-pin-cpu", env=env)
    for w in (by_setting, overridden):
        wait_until(lambda w=w: "worker starting" in w.log(), timeout=30, what="worker start")
    assert pinned_cpu(by_setting.pid) in ALLOWED
    assert all(len(cpus) > 1 for cpus in cpus_of(overridden.pid).values())
    for w in (by_setting, overridden):
        w.signal(signal.SIGTERM)
        assert w.wait(30) == 0, w.log()[-2000:]
