"""Manager: supervises N worker processes. A child that crashes is restarted within about
half a second, with exponential backoff while it keeps crashing and no restart at all once it
crash-loops; a child past its memory budget is recycled (SIGTERM: it finishes or puts back its
jobs, then a fresh one starts); SIGTERM to the manager is forwarded for a graceful stop.
A child that crashed is reported (``on_crash``) before its replacement starts, so its running
jobs are failed over at once instead of after the worker TTL.

A child that stops pulsing is hung and is killed (with ``hang_after_seconds``): each child
writes a byte down a pipe every half second from a thread of its own (``PULSE_FD_ENV`` names
its end), which nothing but code holding the GIL (a C extension that does not release it, a
catastrophic regular expression) or a frozen process can stop. Nothing inside such a process
can act, not even a timeout, so the manager kills it, which is then a crash like any other.

Exit codes of a child: ``EXIT_RECYCLE`` asks for a replacement (its job budget is spent), 0
means it stopped on purpose (a stop request) and stays stopped, anything else is a crash.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from ledgerq.runtime import probes
from ledgerq.runtime.forked import ForkedChild, fork_is_safe, start_forked

log = structlog.get_logger("ledgerq.manager")

#: A child's exit code asking the manager for a fresh replacement.
EXIT_RECYCLE = 3

#: The environment variable that hands a child the write end of its pulse pipe (a file
#: descriptor number). Outside the ``LEDGERQ_`` prefix: it is not a setting.
PULSE_FD_ENV = "MANAGED_WORKER_PULSE_FD"

#: How often a child pulses.
PULSE_INTERVAL_SECONDS = 0.5
#: What a child writes on its pulse pipe once its worker has stopped and it is exiting.
EXITING = b"x"
#: How long an exiting child may stay silent: the interpreter's shutdown stops its pulse
#: thread, and closing pools and flushing logs on a busy host can take seconds.
EXIT_SILENCE_SECONDS = 30.0


def exit_description(code: int) -> str:
    """How a child ended, from ``Popen.returncode`` (negative: the signal that killed it)."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass(frozen=True, slots=True)
class ManagerOptions:
    """How the manager supervises. Times in seconds, memory in MiB."""

    processes: int
    max_memory_mb: float | None = None
    restart_delay_seconds: float = 0.5
    max_restart_delay_seconds: float = 30.0
    crash_loop_restarts: int = 5
    crash_loop_window_seconds: float = 60.0
    stats_interval_seconds: float = 60.0
    stop_timeout_seconds: float = 60.0
    hang_after_seconds: float | None = None
    """Kill a child whose pulse (see the module) has been silent this long; None: never."""


@dataclass
class _Slot:
    index: int
    proc: subprocess.Popen[bytes] | ForkedChild | None = None
    start_at: float = 0.0
    crashes: collections.deque[float] = field(default_factory=collections.deque)
    recycling: bool = False
    done: bool = False  # stopped on purpose, or given up after a crash loop
    pulse_fd: int | None = None  # read end of the child's pulse pipe
    last_pulse: float | None = None  # None until its first pulse: start-up is not watched
    killed_hung: float | None = None  # seconds of silence when it was killed as hung
    exiting: bool = False  # its worker stopped: it is on its way out


class Manager:
    """Runs ``command`` (a worker process) ``options.processes`` times and keeps it running.
    ``command`` may be a function of the slot index (0..N-1), e.g. to give each child its own
    health port. With ``run_forked``, a child is instead a fork of the manager that calls
    ``run_forked(slot)`` and exits with what it returns (see ``runtime/forked.py``), unless
    another thread is alive at that moment: then that child is ``command``. ``run()`` blocks;
    ``request_stop()`` is signal-safe."""

    def __init__(
        self,
        command: Sequence[str] | Callable[[int], Sequence[str]],
        options: ManagerOptions,
        on_crash: Callable[[int, str], None] | None = None,
        *,
        run_forked: Callable[[int], int] | None = None,
    ) -> None:
        """``on_crash(pid, how)`` (optional) is called in the supervising loop for a child
        that exited abnormally (``how``: "killed by SIGKILL", "exit code 1"), before it is
        restarted; it must not raise, and with ``run_forked`` it must leave no thread and no
        connection behind (the next child is forked from this process)."""
        self._on_crash = on_crash
        self._run_forked = run_forked
        fixed = None if callable(command) else list(command)
        self._command_for: Callable[[int], Sequence[str]] = (
            command if callable(command) else (lambda _slot: fixed or [])
        )
        self._options = options
        self._slots = [_Slot(i) for i in range(options.processes)]
        self._stops_requested = 0
        self._stops_forwarded = 0
        self._wake = threading.Event()
        self.restarts = 0
        self.recycled = 0

    def request_stop(self) -> None:
        """Forward a (further) SIGTERM to every child; the first is a graceful stop."""
        self._stops_requested += 1
        self._wake.set()

    def children(self) -> list[int]:
        """Pids of the children running now."""
        return [s.proc.pid for s in self._slots if s.proc is not None and s.proc.poll() is None]

    def run(self) -> int:
        """Supervise until stopped or every slot is done; 0 unless slots were given up."""
        log.info("manager starting", processes=self._options.processes)
        next_stats = time.monotonic() + self._options.stats_interval_seconds
        while True:
            if self._stops_requested:
                return self._stop_all()
            now = time.monotonic()
            for slot in self._slots:
                self._tend(slot, now)
            if all(slot.done for slot in self._slots):
                gave_up = any(slot.crashes for slot in self._slots)
                log.info("every worker process is done", gave_up=gave_up)
                return 1 if gave_up else 0
            if now >= next_stats:
                next_stats = now + self._options.stats_interval_seconds
                self.log_stats()
            self._wake.wait(0.1)

    def _tend(self, slot: _Slot, now: float) -> None:
        if slot.done:
            return
        if slot.proc is None:
            if now >= slot.start_at:
                self._start(slot)
            return
        code = slot.proc.poll()
        if code is None:
            self._check_memory(slot)
            self._check_pulse(slot, now)
            return
        pid, slot.proc = slot.proc.pid, None
        self._close_pulse(slot)
        if code == EXIT_RECYCLE or (slot.recycling and code == 0):
            slot.recycling = False
            self.recycled += 1
            log.info("worker process recycled", slot=slot.index, pid=pid)
            slot.start_at = now
        elif code == 0:
            log.info("worker process stopped on purpose", slot=slot.index, pid=pid)
            slot.done = True
        else:
            self._after_crash(slot, pid, code, now)

    def _start(self, slot: _Slot) -> None:
        forked = self._run_forked is not None and fork_is_safe()
        if self._options.hang_after_seconds is None:
            slot.proc = self._launch(slot.index, forked, pulse=None)
        else:
            read_end, write_end = os.pipe()
            os.set_blocking(read_end, False)
            try:
                slot.proc = self._launch(slot.index, forked, pulse=(read_end, write_end))
            except BaseException:
                os.close(read_end)
                raise
            finally:
                os.close(write_end)
            slot.pulse_fd, slot.last_pulse, slot.killed_hung = read_end, None, None
            slot.exiting = False
        log.info(
            "worker process started",
            slot=slot.index,
            pid=slot.proc.pid,
            start="fork" if forked else "exec",
        )

    def _launch(
        self, index: int, forked: bool, pulse: tuple[int, int] | None
    ) -> subprocess.Popen[bytes] | ForkedChild:
        """Start slot ``index``'s child, handing it the write end of its ``pulse`` pipe (read
        end, write end) through ``PULSE_FD_ENV``."""
        env = {} if pulse is None else {PULSE_FD_ENV: str(pulse[1])}
        if forked:
            run = self._run_forked
            assert run is not None
            # The child keeps no read end: once the manager is gone, its pulse write fails.
            readers = [s.pulse_fd for s in self._slots if s.pulse_fd is not None]
            readers += [pulse[0]] if pulse is not None else []
            return start_forked(lambda: run(index), env=env, close_fds=readers)
        command = list(self._command_for(index))
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            pass_fds=() if pulse is None else (pulse[1],),
            env={**os.environ, **env},
        )

    def _check_pulse(self, slot: _Slot, now: float) -> None:
        """Read what the child pulsed; kill it once it has been silent too long."""
        limit = self._options.hang_after_seconds
        if slot.pulse_fd is None or limit is None or slot.proc is None:
            return
        try:
            while pulses := os.read(slot.pulse_fd, 4096):
                slot.last_pulse = now
                slot.exiting = slot.exiting or EXITING in pulses
        except BlockingIOError:
            pass  # nothing more to read
        if slot.exiting:
            limit = max(limit, EXIT_SILENCE_SECONDS)
        silent = now - slot.last_pulse if slot.last_pulse is not None else 0.0
        if silent > limit and slot.killed_hung is None:
            log.error(
                "worker process hung (no pulse: code holding the GIL, or frozen); killing it",
                slot=slot.index,
                pid=slot.proc.pid,
                silent_s=round(silent, 1),
            )
            slot.killed_hung = silent
            slot.proc.kill()

    def _close_pulse(self, slot: _Slot) -> None:
        if slot.pulse_fd is not None:
            os.close(slot.pulse_fd)
            slot.pulse_fd = None

    def _after_crash(self, slot: _Slot, pid: int, code: int, now: float) -> None:
        how = exit_description(code)
        if slot.killed_hung is not None:
            how = f"hung for {slot.killed_hung:.1f} s, {how}"
        if self._on_crash is not None:
            self._on_crash(pid, how)
        window = self._options.crash_loop_window_seconds
        slot.crashes.append(now)
        while slot.crashes and slot.crashes[0] < now - window:
            slot.crashes.popleft()
        recent = len(slot.crashes)
        if recent > self._options.crash_loop_restarts:
            log.error(
                "worker process crash-loops; not restarting it",
                slot=slot.index,
                crashes=recent,
                window_s=window,
            )
            slot.done = True
            return
        delay = min(
            self._options.restart_delay_seconds * 2 ** (recent - 1),
            self._options.max_restart_delay_seconds,
        )
        log.warning(
            "worker process crashed; restarting", slot=slot.index, pid=pid, how=how, in_s=delay
        )
        self.restarts += 1
        slot.start_at = now + delay

    def _check_memory(self, slot: _Slot) -> None:
        limit = self._options.max_memory_mb
        if limit is None or slot.recycling or slot.proc is None:
            return
        used = probes.memory_mb(slot.proc.pid)
        if used is not None and used > limit:
            log.info(
                "worker process over its memory budget; recycling",
                pid=slot.proc.pid,
                memory_mb=round(used, 1),
                limit_mb=limit,
            )
            slot.recycling = True
            slot.proc.send_signal(signal.SIGTERM)

    def log_stats(self) -> None:
        """Log the fleet of this manager: processes, restarts, recycles, memory."""
        pids = self.children()
        memory = sum(probes.memory_mb(pid) or 0.0 for pid in pids)
        log.info(
            "fleet stats",
            processes=len(pids),
            restarts=self.restarts,
            recycled=self.recycled,
            memory_mb=round(memory, 1),
        )

    def _stop_all(self) -> int:
        deadline = time.monotonic() + self._options.stop_timeout_seconds
        while True:
            if self._stops_forwarded < self._stops_requested:
                self._stops_forwarded = self._stops_requested
                log.info("stopping worker processes", pids=self.children())
                for pid_slot in self._slots:
                    if pid_slot.proc is not None and pid_slot.proc.poll() is None:
                        pid_slot.proc.send_signal(signal.SIGTERM)
            if not self.children():
                for slot in self._slots:
                    self._close_pulse(slot)
                log.info("manager stopped")
                return 0
            if time.monotonic() > deadline:
                log.error("worker processes did not stop in time; killing", pids=self.children())
                for slot in self._slots:
                    if slot.proc is not None and slot.proc.poll() is None:
                        slot.proc.kill()
                return 1
            self._wake.clear()
            self._wake.wait(0.1)
