"""The manager with tiny real child processes: crash restarts with backoff, crash-loop
protection, recycling on exit code and memory, and SIGTERM forwarding."""

from __future__ import annotations

import sys
import threading
import time

from ledgerq.runtime.manager import (
    EXIT_RECYCLE,
    PULSE_FD_ENV,
    Manager,
    ManagerOptions,
    exit_description,
)
from tests.helpers import wait_until

FAST = {"restart_delay_seconds": 0.05, "crash_loop_window_seconds": 30.0}


def child(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def run_in_thread(manager: Manager) -> tuple[threading.Thread, list[int]]:
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(manager.run()), daemon=True)
    thread.start()
    return thread, result


def test_a_crash_looping_child_is_given_up_and_the_manager_exits_1() -> None:
    manager = Manager(
        child("import sys; sys.exit(7)"),
        ManagerOptions(processes=2, crash_loop_restarts=3, **FAST),  # type: ignore[arg-type]
    )
    began = time.monotonic()
    assert manager.run() == 1
    # Each slot: 1 start + 3 restarts with backoff 0.05, 0.1, 0.2 s, then given up.
    assert manager.restarts == 6
    assert time.monotonic() - began < 20


def test_recycle_exit_code_restarts_the_child() -> None:
    manager = Manager(
        child(f"import sys; sys.exit({EXIT_RECYCLE})"),
        ManagerOptions(processes=1, **FAST),  # type: ignore[arg-type]
    )
    thread, result = run_in_thread(manager)
    wait_until(lambda: manager.recycled >= 3, timeout=30, what="three recycles")
    assert manager.restarts == 0
    manager.request_stop()
    thread.join(30)
    assert result == [0]


def test_a_child_that_exits_0_stopped_on_purpose_and_stays_stopped() -> None:
    manager = Manager(child("pass"), ManagerOptions(processes=2, **FAST))  # type: ignore[arg-type]
    assert manager.run() == 0
    assert (manager.restarts, manager.recycled) == (0, 0)


def test_sigterm_is_forwarded_and_children_stop_gracefully() -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "time.sleep(60)"
    )
    manager = Manager(child(code), ManagerOptions(processes=3, **FAST))  # type: ignore[arg-type]
    thread, result = run_in_thread(manager)
    pids = wait_until(
        lambda: manager.children() if len(manager.children()) == 3 else None, what="3 children"
    )
    manager.request_stop()
    thread.join(30)
    assert result == [0] and manager.children() == []
    assert manager.restarts == 0 and len(set(pids)) == 3


def test_a_child_over_its_memory_budget_is_recycled() -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "ballast = bytearray(120 * 2**20)\n"
        "time.sleep(60)"
    )
    manager = Manager(
        child(code),
        ManagerOptions(processes=1, max_memory_mb=80, **FAST),  # type: ignore[arg-type]
    )
    thread, result = run_in_thread(manager)
    wait_until(lambda: manager.recycled >= 2, timeout=60, what="recycled twice")
    assert manager.restarts == 0
    manager.request_stop()
    thread.join(30)
    assert result == [0]


def test_a_crash_is_reported_before_the_restart_and_a_clean_exit_is_not() -> None:
    reported: list[tuple[int, str]] = []
    code = "import os, signal, sys; os.kill(os.getpid(), signal.SIGKILL)"
    manager = Manager(
        child(code),
        ManagerOptions(processes=1, crash_loop_restarts=1, **FAST),  # type: ignore[arg-type]
        on_crash=lambda pid, how: reported.append((pid, how)),
    )
    assert manager.run() == 1
    assert [how for _, how in reported] == ["killed by SIGKILL"] * 2
    assert len({pid for pid, _ in reported}) == 2

    def report(pid: int, how: str) -> None:
        reported.append((pid, how))

    assert Manager(child("pass"), ManagerOptions(processes=1, **FAST), report).run() == 0  # type: ignore[arg-type]
    recycling = Manager(
        child(f"import sys; sys.exit({EXIT_RECYCLE})"),
        ManagerOptions(processes=1, **FAST),  # type: ignore[arg-type]
        on_crash=report,
    )
    thread, _ = run_in_thread(recycling)
    wait_until(lambda: recycling.recycled >= 2, timeout=30, what="two recycles")
    recycling.request_stop()
    thread.join(30)
    assert len(reported) == 2


def test_exit_description_names_the_signal_or_the_code() -> None:
    assert exit_description(-9) == "killed by SIGKILL"
    assert exit_description(1) == "exit code 1"
    assert exit_description(-200) == "killed by signal 200"


def pulsing_child(pulses: int, then: str) -> list[str]:
    """A child that pulses ``pulses`` times, 0.1 s apart, then runs ``then``."""
    return child(
        "import os, time\n"
        f"fd = int(os.environ['{PULSE_FD_ENV}'])\n"
        f"for _ in range({pulses}):\n"
        "    os.write(fd, b'.'); time.sleep(0.1)\n"
        f"{then}\n"
    )


def test_a_child_that_falls_silent_is_killed_as_hung_and_reported() -> None:
    reported: list[str] = []
    manager = Manager(
        pulsing_child(3, "time.sleep(60)"),
        ManagerOptions(processes=1, crash_loop_restarts=0, hang_after_seconds=0.5, **FAST),  # type: ignore[arg-type]
        on_crash=lambda _pid, how: reported.append(how),
    )
    began = time.monotonic()
    assert manager.run() == 1  # killed, then given up (no restart allowed)
    assert time.monotonic() - began < 10
    [how] = reported
    assert how.startswith("hung for ") and how.endswith("killed by SIGKILL")


def test_a_pulsing_child_and_a_silent_start_up_are_left_alone() -> None:
    # Pulses for 1.5 s with a 0.5 s limit, then exits 0: never killed. A child that never
    # pulsed (still starting up) is not watched either.
    reported: list[str] = []
    for command in (pulsing_child(15, "pass"), child("import time; time.sleep(1.2)")):
        manager = Manager(
            command,
            ManagerOptions(processes=1, hang_after_seconds=0.5, **FAST),  # type: ignore[arg-type]
            on_crash=lambda _pid, how: reported.append(how),
        )
        assert manager.run() == 0
        assert reported == [] and manager.restarts == 0
