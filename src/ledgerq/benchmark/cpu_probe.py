"""CPU accounting of one bench run for the process-count sweep: the CPU seconds of the
PostgreSQL backends serving the bench database, of the worker processes and of Redis, counted
only while the run's workers are alive, so the prefill before them is left out.

Linux only (``/proc``). A backend or worker that exits between two samples keeps its last
sample, so up to one sampling interval of its CPU may be missed: the figures are a floor.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Seconds between samples (a /proc scan and one pg_stat_activity query).
SAMPLE_SECONDS = 0.1
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the probe needs."""

    comm: str
    pgrp: int
    cpu_seconds: float
    """utime + stime + cutime + cstime: the process and its reaped children."""


def parse_stat(text: str, ticks: int = _TICKS) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line; ``ValueError`` when it is not one. The command name
    sits in parentheses and may hold spaces, so fields are counted after the last ``)``."""
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 0 or close_at < open_at:
        raise ValueError(f"not a /proc stat line: {text[:60]!r}")
    rest = text[close_at + 2 :].split()
    # rest[0] is field 3 (state); pgrp is field 5, utime..cstime are fields 14-17.
    if len(rest) < 15:
        raise ValueError(f"short /proc stat line: {text[:60]!r}")
    cpu = sum(int(rest[i]) for i in range(11, 15))
    return ProcStat(text[open_at + 1 : close_at], int(rest[2]), cpu / ticks)


def read_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` parsed, or None when the process is gone."""
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError):
        return None


def redis_cpu_seconds(info: dict[str, Any]) -> float:
    """Redis's own CPU seconds (``used_cpu_sys`` + ``used_cpu_user`` of INFO CPU)."""
    return float(info.get("used_cpu_sys", 0.0)) + float(info.get("used_cpu_user", 0.0))


@dataclass
class Tally:
    """Last CPU sample per process, minus each one's CPU at the window's start."""

    last: dict[int, float] = field(default_factory=dict)
    base: dict[int, float] = field(default_factory=dict)

    def see(self, pid: int, cpu_seconds: float, started: bool) -> None:
        """Record a sample; a process first seen before the window starts counts from there."""
        if pid not in self.last and not started:
            self.base[pid] = cpu_seconds
        self.last[pid] = cpu_seconds

    def rebase(self) -> None:
        """Start the window now: what every known process used so far is left out."""
        self.base = dict(self.last)

    def total(self) -> float:
        """CPU seconds used inside the window by every process seen."""
        return sum(cpu - self.base.get(pid, 0.0) for pid, cpu in self.last.items())


@dataclass(frozen=True, slots=True)
class Readings:
    """One run's CPU, counted from the workers' launch to their exit."""

    window_s: float
    db_cpu_s: float | None
    worker_cpu_s: float
    redis_cpu_s: float | None
    db_backends: int

    def as_row(self) -> dict[str, Any]:
        """Fields added to the run's result line."""
        return {
            "window_s": round(self.window_s, 3),
            "db_cpu_s": None if self.db_cpu_s is None else round(self.db_cpu_s, 3),
            "worker_cpu_s": round(self.worker_cpu_s, 3),
            "redis_cpu_s": None if self.redis_cpu_s is None else round(self.redis_cpu_s, 3),
            "db_backends": self.db_backends,
        }


@dataclass
class Sources:
    """Where the probe reads: the bench database's backend pids (None: not PostgreSQL) and
    Redis's INFO CPU (None: no Redis)."""

    backend_pids: Callable[[], list[int]] | None = None
    redis_info: Callable[[], dict[str, Any]] | None = None


class Probe:
    """Samples in a thread while one harness run goes; ``readings()`` after ``stop()``."""

    def __init__(self, pgids_file: Path, sources: Sources) -> None:
        self._pgids_file = pgids_file
        self._sources = sources
        self._workers = Tally()
        self._db = Tally()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-cpu-probe", daemon=True)
        self._started_at: float | None = None
        self._ended_at: float | None = None
        self._redis_start: float | None = None
        self._redis_end: float | None = None

    def start(self) -> None:
        """Begin sampling."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (the window closes here if the workers were still alive)."""
        self._stop.set()
        self._thread.join(10.0)
        if self._started_at is not None and self._ended_at is None:
            self._close()

    def readings(self) -> Readings | None:
        """The run's CPU, or None when no worker was ever seen."""
        if self._started_at is None or self._ended_at is None:
            return None
        redis = None
        if self._redis_start is not None and self._redis_end is not None:
            redis = self._redis_end - self._redis_start
        return Readings(
            window_s=self._ended_at - self._started_at,
            db_cpu_s=self._db.total() if self._sources.backend_pids else None,
            worker_cpu_s=self._workers.total(),
            redis_cpu_s=redis,
            db_backends=len(set(self._db.last) - set(self._db.base)),
        )

    def _loop(self) -> None:
        while not self._stop.is_set() and self._ended_at is None:
            self._sample()
            self._stop.wait(SAMPLE_SECONDS)

    def _sample(self) -> None:
        groups = self._worker_groups()
        started = self._started_at is not None
        alive = self._sample_workers(groups, started)
        self._sample_db(started)
        if not started and alive:
            self._started_at = time.monotonic()
            self._db.rebase()
            self._redis_start = self._redis_cpu()
        elif started and not alive:
            self._close()

    def _close(self) -> None:
        self._ended_at = time.monotonic()
        self._redis_end = self._redis_cpu()

    def _worker_groups(self) -> set[int]:
        with contextlib.suppress(OSError):
            text = self._pgids_file.read_text()
            return {int(line) for line in text.split() if line.isdigit()}
        return set()

    def _sample_workers(self, groups: set[int], started: bool) -> bool:
        # Each worker leads its process group (the harness starts it in a new session), and a
        # worker's children, if any, count in its cutime once reaped: reading the leaders
        # alone keeps the probe's own CPU small on a loaded machine (no /proc scan).
        alive = False
        for pgid in groups:
            stat = read_stat(pgid)
            if stat is not None and stat.pgrp == pgid:
                alive = True
                self._workers.see(pgid, stat.cpu_seconds, started=True)
        return alive

    def _sample_db(self, started: bool) -> None:
        if self._sources.backend_pids is None:
            return
        with contextlib.suppress(Exception):  # a failed sample only makes the floor lower
            for pid in self._sources.backend_pids():
                stat = read_stat(pid)
                # Only a local postgres process: a remote server's pid means another process here.
                if stat is not None and stat.comm.startswith("postgres"):
                    self._db.see(pid, stat.cpu_seconds, started)

    def _redis_cpu(self) -> float | None:
        if self._sources.redis_info is None:
            return None
        try:
            return redis_cpu_seconds(self._sources.redis_info())
        except Exception:  # Redis down: no Redis figure for this run, never a failed run
            return None


@contextlib.contextmanager
def watching(pgids_file: Path, sources: Sources) -> Iterator[Probe]:
    """Run a probe for the block; read ``probe.readings()`` after it."""
    probe = Probe(pgids_file, sources)
    probe.start()
    try:
        yield probe
    finally:
        probe.stop()
