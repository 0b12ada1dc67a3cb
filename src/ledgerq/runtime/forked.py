"""Forked children: the manager's way to start a worker process without a fresh interpreter.

A worker's start-up is almost all imports (SQLAlchemy, pydantic, psycopg, ledgerq's own
modules: about 1 s of CPU on a slow 2-core machine). A manager has imported all of them and
loaded the application before it starts its first child, so a child forked from it reaches
its first job in tens of milliseconds, its restarts after a crash or a recycle are as fast,
and the pages of the imported modules stay shared between the children.

Fork is safe here only because the manager forks from a plain state:
- one thread (``fork_is_safe``): a lock another thread held at the fork would stay locked in
  the child for ever, so with another thread alive the manager execs instead;
- no connection of the manager's in use by the child: the manager's own database work (the
  failover of a crashed child) runs on a private application that it closes again, and the
  child builds its own pools; whatever the child inherits it never touches, and it ends with
  ``os._exit``, so no finalizer of an inherited object runs (a psycopg connection's would
  tell the server the manager's session is over).

A child runs the exit hooks registered after the fork, not the manager's (registered
before it, they run when the manager exits), as multiprocessing's forked children do.

``ForkedChild`` answers as much of ``subprocess.Popen`` as the manager uses.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterable


def fork_is_safe() -> bool:
    """Whether this process may fork a worker: POSIX, and no thread but this one."""
    return hasattr(os, "fork") and threading.active_count() == 1


class ForkedChild:
    """A forked child process, seen through the part of ``subprocess.Popen`` the manager
    uses: ``pid``, ``returncode``, ``poll``, ``send_signal``, ``kill``."""

    def __init__(self, pid: int) -> None:
        """Wrap the child ``pid`` (this process must be its parent)."""
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once the child has ended (negative: the signal that killed it, as
        ``Popen`` says), else None; reaps the child, so call it until it answers."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its code is lost
                self.returncode = 1
            else:
                if pid == self.pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the child unless it has been reaped."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL the child unless it has been reaped."""
        self.send_signal(signal.SIGKILL)


def start_forked(
    run: Callable[[], int], *, env: dict[str, str], close_fds: Iterable[int] = ()
) -> ForkedChild:
    """Fork a child that sets ``env``, closes ``close_fds`` (the parent's ends of other
    children's pipes), reads stdin from ``/dev/null``, takes SIGTERM and SIGINT back to
    Python's defaults, runs ``run()`` and exits with its code (1 if it raised, after the
    traceback). Never returns in the child."""
    sys.stdout.flush()  # or what the parent has buffered would be written twice
    sys.stderr.flush()
    # Held back until the child has its own handlers: a SIGTERM sent to it at once must stop
    # the child, not run the manager's handler in the child's copy of the manager.
    stops = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stops)
    try:
        pid = os.fork()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        raise
    if pid:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        return ForkedChild(pid)
    code = 1
    try:
        # The exit hooks registered so far are the manager's: they run when it exits, not in
        # each child (as with multiprocessing's forked children); the child's own run below.
        atexit._clear()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        for fd in close_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.update(env)
        code = run()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        # What an interpreter's own exit would do: the child's exit hooks (hints still to
        # confirm, gathered log lines), then the streams; nothing of the parent's is
        # finalized.
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)
