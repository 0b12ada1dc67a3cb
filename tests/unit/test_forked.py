"""Forked children (``runtime/forked.py``): the child runs the function and exits with its
code, a signal's death reads as ``Popen`` reads it, the child gets its environment and a
SIGTERM of its own at once, and the manager forks only while it is the one thread."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ledgerq.runtime import manager as manager_module
from ledgerq.runtime.forked import ForkedChild, fork_is_safe, start_forked
from ledgerq.runtime.manager import Manager, ManagerOptions
from tests.helpers import wait_until

FAST: dict[str, float] = {"restart_delay_seconds": 0.05, "crash_loop_window_seconds": 30.0}


def ended(child: ForkedChild) -> int | None:
    wait_until(lambda: child.poll() is not None, timeout=10, what="the child's exit")
    return child.returncode


def sleep_long() -> int:
    time.sleep(30)
    return 0


def test_a_forked_child_exits_with_what_its_function_returns() -> None:
    assert ended(start_forked(lambda: 7, env={})) == 7
    assert ended(start_forked(lambda: 0, env={})) == 0


def test_a_child_whose_function_raises_exits_1() -> None:
    def boom() -> int:
        raise RuntimeError("boom")

    assert ended(start_forked(boom, env={})) == 1


def test_a_child_gets_its_environment_and_loses_the_fds_it_is_told_to_close(
    tmp_path: Path,
) -> None:
    read_end, write_end = os.pipe()
    out = tmp_path / "seen"

    def look() -> int:
        try:
            os.fstat(read_end)
            still_open = True
        except OSError:
            still_open = False
        out.write_text(f"{os.environ.get('FORKED_PROBE')} {still_open}")
        return 0

    try:
        assert ended(start_forked(look, env={"FORKED_PROBE": "yes"}, close_fds=[read_end])) == 0
    finally:
        os.close(read_end)
        os.close(write_end)
    assert out.read_text() == "yes False"
    assert "FORKED_PROBE" not in os.environ  # only the child's


def test_a_sigterm_kills_the_child_not_a_copy_of_the_parents_handler() -> None:
    caught: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: caught.append(signum))
    try:
        child = start_forked(sleep_long, env={})
        child.send_signal(signal.SIGTERM)  # at once: maybe before the child's first line
        assert ended(child) == -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert caught == []
    child.kill()  # reaped: nothing happens
    assert child.poll() == -signal.SIGTERM


def test_fork_is_safe_only_while_this_is_the_one_thread() -> None:
    assert fork_is_safe() == (threading.active_count() == 1)
    release = threading.Event()
    other = threading.Thread(target=release.wait, daemon=True)
    other.start()
    try:
        assert not fork_is_safe()
    finally:
        release.set()
        other.join()


@pytest.mark.parametrize("safe", [True, False])
def test_the_manager_forks_when_it_is_safe_and_execs_otherwise(
    safe: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager_module, "fork_is_safe", lambda: safe)
    forked_slots: list[int] = []
    manager = Manager(
        # exec: exits 0 (stopped on purpose); forked: slot 0 exits 0, slot 1 crash-loops.
        lambda slot: ["true"],
        ManagerOptions(processes=2, crash_loop_restarts=1, **FAST),
        run_forked=lambda slot: 5 * slot,
    )
    original_start = start_forked

    def spy(run: Callable[[], int], **kwargs: Any) -> ForkedChild:
        child = original_start(run, **kwargs)
        forked_slots.append(child.pid)
        return child

    monkeypatch.setattr(manager_module, "start_forked", spy)
    code = manager.run()
    if safe:
        assert code == 1  # slot 1 exited 5 each time: given up
        assert len(forked_slots) == 3  # slot 0 once, slot 1 twice (one restart)
    else:
        assert code == 0 and forked_slots == []
