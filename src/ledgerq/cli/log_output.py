"""Where a process's log lines go: written at once, or, in a worker, routine lines (DEBUG and
INFO) gathered and written together by one thread within ``GATHER_SECONDS``.

Why a worker gathers: it writes a line at each job's start and end from its slot threads, and
each write is a system call that lets go of the GIL. Under load a slot then waits about 1.4 ms
to get it back, and the writes' lock and wake-ups cost CPU besides: a no-op drain at the
default INFO level took twice as long as at WARNING (docs/benchmarks.md). Gathered, the slots
only append to a queue.

Warnings and errors are never held back: each is written at once, after every routine line
gathered before it, so lines keep their order. Gathering ends when the worker stops (and at
exit); a process killed outright (SIGKILL) loses the routine lines of its last
``GATHER_SECONDS``. When the stream stalls (a pipe nobody reads), at most ``MAX_GATHERED``
lines wait; past that a routine line is written at once, so a slot waits as it did before.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from typing import TextIO

#: How long a routine line may wait to be written with the others, in seconds.
GATHER_SECONDS = 0.05
#: Routine lines held at most; past this they are written at once by their own thread.
MAX_GATHERED = 10_000


class LogOutput:
    """One process's log stream: ``urgent`` lines are written at once, ``routine`` ones too
    until ``gather`` is called, then together within ``GATHER_SECONDS``."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()  # one writer at a time, gathered lines first
        self._gathered: deque[str] = deque()
        self._gathering = False
        self._scheduled = False  # the writer thread has been woken for the gathered lines
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None

    def routine(self, line: str) -> None:
        """A DEBUG or INFO line."""
        if not self._gathering or len(self._gathered) >= MAX_GATHERED:
            self.urgent(line)
            return
        self._gathered.append(line)  # atomic under the GIL: no lock on a slot's path
        if not self._scheduled:
            self._scheduled = True
            self._wake.set()

    def urgent(self, line: str) -> None:
        """A line written at once, after the routine lines gathered before it."""
        with self._lock:
            self._write(self._take(), line)

    def gather(self) -> None:
        """Gather routine lines from now on (a worker, once it starts)."""
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_gathered, name="ledgerq-log-writer", daemon=True
                )
                self._writer.start()
                atexit.register(self.flush)
            self._gathering = True

    def write_at_once(self) -> None:
        """Stop gathering, and write what was gathered (a worker that stopped)."""
        self._gathering = False
        self.flush()

    def flush(self) -> None:
        """Write every gathered line now."""
        with self._lock:
            self._write(self._take())

    def _take(self) -> list[str]:
        taken: list[str] = []
        while True:
            try:
                taken.append(self._gathered.popleft())
            except IndexError:
                return taken

    def _write(self, lines: list[str], last: str | None = None) -> None:
        if last is not None:
            lines.append(last)
        if not lines:
            return
        try:
            self._stream.write("\n".join(lines) + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            if last is not None:
                raise  # the caller's own line: it sees the failure, as a direct write would
            # Gathered lines whose stream failed (closed, broken pipe) are dropped: the writer
            # thread must live on, or gathered lines would pile up unwritten.

    def _write_gathered(self) -> None:
        while True:
            self._wake.wait()
            time.sleep(GATHER_SECONDS)
            self._wake.clear()
            self._scheduled = False  # lines appended from here on wake the next round
            self.flush()
