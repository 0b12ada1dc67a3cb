"""CPU pinning for a worker process (``worker start --pin-cpu``, ``LEDGERQ_PIN_CPU``).

A worker runs its jobs on threads that take turns holding CPython's GIL. When a thread's
blocking call returns (a database or Redis reply), it must take the GIL back; if the process
may run on several CPUs, that hand-over wakes threads across CPUs, and every job's I/O pays
for it. Pinned to one CPU, the same hand-overs stay on one core. Measured on a 2-core machine:
a Redis ``INCR`` from 8 threads costs 90 us of CPU per call unpinned and 28 us pinned, and a
no-op drain of 20,000 jobs by two workers runs about a quarter faster (docs/benchmarks.md).

Each pinned worker takes a CPU of its own: it holds an ``flock`` on one lock file per CPU in
``<tempdir>/ledgerq-cpu-locks``, so workers on one host (sharing that folder) never share a
CPU, and the kernel drops the lock when the process ends, however it ends. A worker that finds
every allowed CPU taken runs unpinned. The cost: the threads of one process never use two
cores at once, which only matters for jobs doing multi-threaded native work (numpy, image
codecs) that releases the GIL.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock, and no sched_setaffinity either
    fcntl = None  # type: ignore[assignment]

LOCK_FOLDER = "ledgerq-cpu-locks"


@dataclass
class CpuClaim:
    """This process's hold on one CPU; the lock file stays open (held) while this lives."""

    cpu: int
    lock_fd: int

    def release(self) -> None:
        """Give the CPU back to other workers (the pinning itself stays)."""
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def default_lock_folder() -> Path:
    """Where workers of this host register their CPUs: a folder in the system's temp dir."""
    return Path(tempfile.gettempdir()) / LOCK_FOLDER


def claim_cpu(lock_folder: Path | None = None) -> CpuClaim | None:
    """Pin this process, every thread of it, to one allowed CPU that no other worker holds.

    None (and nothing changed) when the platform cannot pin, only one CPU is allowed, or every
    allowed CPU is held by another worker.
    """
    if fcntl is None or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    folder = lock_folder or default_lock_folder()
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    with contextlib.suppress(OSError):  # shared by every user's workers (sticky, like /tmp)
        folder.chmod(0o1777)
    for cpu in allowed:
        fd = _lock(folder / f"cpu{cpu}.lock")
        if fd is None:
            continue
        _pin_every_thread(cpu)
        return CpuClaim(cpu, fd)
    return None


def _lock(path: Path) -> int | None:
    """An open descriptor holding an exclusive flock on ``path``, or None if it is held."""
    assert fcntl is not None
    try:
        # Read-only is enough for flock, and lets workers of other users share the files.
        fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError:  # a read-only folder: no CPU to claim here
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _pin_every_thread(cpu: int) -> None:
    # sched_setaffinity(0) pins only the calling thread (and threads it starts later), so pin
    # the threads that already run too (a pool's, a logging handler's).
    try:
        thread_ids = [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        thread_ids = [0]
    for thread_id in thread_ids:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(thread_id, {cpu})
