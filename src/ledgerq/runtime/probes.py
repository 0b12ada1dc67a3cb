"""Probes of this process for health checks: resident memory and CPU use (standard library
only; Linux reads /proc, elsewhere the peak resident size stands in)."""

from __future__ import annotations

import os
import resource
import sys
import time

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def memory_mb(pid: int | None = None) -> float | None:
    """Resident memory of ``pid`` (this process by default) in MiB, or None if unknown."""
    try:
        with open(f"/proc/{pid or os.getpid()}/statm") as statm:
            return int(statm.read().split()[1]) * _PAGE / 1048576
    except (OSError, ValueError, IndexError):
        if pid is not None:
            return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1048576 if sys.platform == "darwin" else peak / 1024


class CpuMeter:
    """CPU use of this process since the previous reading, in percent of one core."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._wall = time.monotonic()

    def read(self) -> float:
        """Percent of one core used since the last call (or since construction)."""
        cpu, wall = time.process_time(), time.monotonic()
        used = (cpu - self._cpu) / max(wall - self._wall, 1e-6) * 100.0
        self._cpu, self._wall = cpu, wall
        return round(used, 1)
