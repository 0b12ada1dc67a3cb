"""The manager's hang watch and a child that is exiting: once the child says its worker
stopped, a silence while the interpreter shuts down is not a hang (it used to be killed as
hung, and a recycle looked like a crash)."""

from __future__ import annotations

import sys
import threading
import time

from ledgerq.runtime.manager import EXITING, PULSE_FD_ENV, Manager, ManagerOptions

#: A child that pulses, optionally says it is exiting, then stays silent for 1.5 s and exits 0.
CHILD = """
import os, sys, time
fd = int(os.environ[{env!r}])
for _ in range(3):
    os.write(fd, b".")
    time.sleep(0.1)
if sys.argv[1] == "say":
    os.write(fd, {exiting!r})
time.sleep(1.5)
"""


def _run_one(say_exiting: bool) -> tuple[int, int]:
    """Supervise one such child until it ended (0 from ``run``) or crashed; (code, crashes)."""
    script = CHILD.format(env=PULSE_FD_ENV, exiting=EXITING)
    command = [sys.executable, "-c", script, "say" if say_exiting else "quiet"]
    # A crashed child would be restarted only after 60 s: the test stops the manager first.
    options = ManagerOptions(processes=1, hang_after_seconds=0.6, restart_delay_seconds=60)
    crashes: list[str] = []
    manager = Manager(command, options, on_crash=lambda _pid, how: crashes.append(how))
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(manager.run()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while thread.is_alive() and not crashes and time.monotonic() < deadline:
        thread.join(0.05)
    if thread.is_alive():
        manager.request_stop()
        thread.join(20)
    return (result[0] if result else -1), len(crashes)


def test_an_exiting_child_silent_past_the_hang_limit_is_not_killed() -> None:
    code, crashes = _run_one(say_exiting=True)
    assert crashes == 0 and code == 0


def test_a_silent_child_that_did_not_say_so_is_killed_as_hung() -> None:
    _code, crashes = _run_one(say_exiting=False)
    assert crashes == 1
