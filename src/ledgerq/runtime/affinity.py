"""CPU pinning for a worker process (``worker start --pin-cpu``, ``LEDGERQ_PIN_CPU``).

A worker runs its jobs on threads that take turns holding CPython's GIL. When a thread's
blocking call returns (a database or Redis reply), it must take the GIL back; if the process
may run on several CPUs, that hand-over wakes threads across CPUs, and every job's I/O pays
for it. Pinned to one CPU, the same hand-overs stay on one core. Measured on a 2-core machine:
a Redis ``INCR`` from 8 threads costs 90 us of CPU per call unpinned and 28 us pinned, and a
no-op drain of 20,000 jobs by two workers runs about a quarter faster (docs/benchmarks.md).

Each pinned worker takes a CPU of its own: it holds an ``flock`` on one lock file per CPU in
``<tempdir>/ledgerq-cpu-locks-<uid>``, so workers of one user on one host (sharing that folder)
never share a CPU, and the kernel drops the lock when the process ends, however it ends. A
worker that finds every allowed CPU taken runs unpinned. The cost: the threads of one process
never use two cores at once, which only matters for jobs doing multi-threaded native work
(numpy, image codecs) that releases the GIL.

The folder is private, because a shared, world-writable one in ``/tmp`` let any local user
plant a symlink where a lock file goes and have a worker create files wherever it may write:
it is created with mode 0700 and used only if, opened without following links, it is a folder
owned by this user that neither group nor others may write to (otherwise the worker runs
unpinned and says why). Lock files are opened relative to that open folder with
``O_NOFOLLOW``, so a link planted in its place is refused, never followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

import structlog

try:
    import fcntl
except ImportError:  # Windows: no flock, and no sched_setaffinity either
    fcntl = None  # type: ignore[assignment]

LOCK_FOLDER = "ledgerq-cpu-locks"
"""The lock folder's name without the owner's uid (see ``default_lock_folder``)."""

log = structlog.get_logger("ledgerq.affinity")


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
    """Where this user's workers on this host register their CPUs: a per-user folder in the
    system's temp dir, ``<tempdir>/ledgerq-cpu-locks-<uid>``."""
    return Path(tempfile.gettempdir()) / f"{LOCK_FOLDER}-{os.getuid()}"


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
    folder_fd = open_private_folder(lock_folder or default_lock_folder())
    if folder_fd is None:
        return None
    try:
        for cpu in allowed:
            fd = _lock(folder_fd, f"cpu{cpu}.lock")
            if fd is None:
                continue
            _pin_every_thread(cpu)
            return CpuClaim(cpu, fd)
    finally:
        os.close(folder_fd)
    return None


def open_private_folder(folder: Path) -> int | None:
    """A descriptor of ``folder`` (created with mode 0700 if missing) if it is a real folder,
    not a symlink, owned by this user and not writable by group or others; else None, with a
    warning that says why. Checked on the open descriptor, so the path cannot be swapped
    between the check and the use."""
    try:
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass  # checked below, whoever made it
    except OSError as exc:
        log.warning("cannot create the CPU lock folder; running unpinned", error=str(exc))
        return None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:  # ELOOP: a symlink; ENOTDIR: not a folder
        log.warning(
            "the CPU lock folder is a symlink or not a folder; running unpinned",
            folder=str(folder),
            error=str(exc),
        )
        return None
    info = os.fstat(fd)
    problem = None
    if info.st_uid != os.getuid():
        problem = f"it is owned by uid {info.st_uid}, not by this user ({os.getuid()})"
    elif info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problem = f"it is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    if problem is not None:
        os.close(fd)
        log.warning(
            f"the CPU lock folder is not private: {problem}; running unpinned",
            folder=str(folder),
        )
        return None
    return fd


def _lock(folder_fd: int, name: str) -> int | None:
    """An open descriptor holding an exclusive flock on ``name`` in the open folder, or None
    if another process holds it or it is not a plain file (a planted symlink is refused)."""
    assert fcntl is not None
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, 0o600, dir_fd=folder_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            log.warning("refused a symlink in place of a CPU lock file", lock_file=name)
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # a FIFO or device planted there
        os.close(fd)
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
