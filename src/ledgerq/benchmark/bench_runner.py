"""Runs the plan: every (trial, target, mode) as one harness process, exactly as the peers'
run_all.sh does (bounded by a timeout, worker groups reaped after), appending each result line
to a JSONL file. Trials are interleaved so slow drift of the machine hits every target alike.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgerq.benchmark import BenchError
from ledgerq.benchmark.bench_report import parse_result_line

#: The modes run by default, in the order they run for each target: the harness's, then
#: ``memory`` (worker RSS idle and busy, measured by rss_probe.py through the harness).
MODES = ("enqueue_single", "enqueue_bulk", "drain", "io", "latency", "memory")
#: Modes run only when named (``--only memory_drain``: RSS at 10% and 100% of a drain of
#: ``--n`` jobs; give it a ``--timeout`` to match).
OPTIONAL_MODES = ("memory_drain",)
#: The modes rss_probe.py measures instead of the harness.
MEMORY_MODES = ("memory", "memory_drain")
RSS_PROBE = Path(__file__).with_name("rss_probe.py")
#: Per-run bound, as run_all.sh's PER_RUN_TIMEOUT (the harness caps a drain at 95 s itself).
RUN_TIMEOUT_SECONDS = 120.0
#: Default ledger of each backend the bench runs ledgerq on; SQLite's lives in the scratch folder.
DEFAULT_URLS = {
    "postgresql": "postgresql://postgres@127.0.0.1:5432/ledgerq_bench",
    "sqlite": "sqlite:///{scratch}/ledgerq_bench.db",
    "mysql": "mariadb://root@127.0.0.1:3306/ledgerq_bench",
    "postgresql-redis": "postgresql://postgres@127.0.0.1:5432/ledgerq_bench",
    "postgresql-redis-down": "postgresql://postgres@127.0.0.1:5432/ledgerq_bench",
    # PgBouncer's default port, in front of the ``postgresql`` ledger (``--pgbouncer-url``).
    "postgresql-pgbouncer": "postgresql://postgres@127.0.0.1:6432/ledgerq_bench",
}
_LABELS = {
    "postgresql": "postgresql",
    "sqlite": "sqlite",
    "mysql": "mariadb",
    "postgresql-redis": "postgresql_redis",
    "postgresql-redis-down": "postgresql_redis_down",
    "postgresql-pgbouncer": "postgresql_pgbouncer",
}
#: The key suffix of a ledgerq target whose workers are pinned (``ledgerq bench --pinned``).
PINNED_SUFFIX = "_pinned"
#: The Redis transport of the ``postgresql-redis`` backend: its own database number and
#: namespace, apart from the harness's bookkeeping (db 15).
BENCH_REDIS_URL = "redis://127.0.0.1:6379/14"
#: The ``postgresql-redis-down`` backend's Redis: a loopback port nothing listens on, so every
#: worker runs the Redis transport through an outage from its start (the ``auto`` driver
#: polls the ledger) and every producer's push fails (the ledger keeps the jobs).
OUTAGE_REDIS_URL = "redis://127.0.0.1:1/14"


@dataclass(frozen=True, slots=True)
class Sizes:
    """Workload sizes, passed to the harness as its BENCH_* variables."""

    n: int = 20_000
    n_io: int = 2_000
    lat_rate: float = 200.0
    lat_secs: float = 10.0

    def env(self) -> dict[str, str]:
        """The harness's environment variables for these sizes."""
        return {
            "BENCH_N": str(self.n),
            "BENCH_N_IO": str(self.n_io),
            "BENCH_LAT_RATE": f"{self.lat_rate:g}",
            "BENCH_LAT_SECS": f"{self.lat_secs:g}",
        }


@dataclass(frozen=True, slots=True)
class Target:
    """One thing measured: ledgerq on one backend, or one peer. ``argv`` + [mode] runs it."""

    key: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, Any] = field(default_factory=dict)
    """Fields added to each result line of this target (the sweep's ``procs``)."""

    def command(self, mode: str) -> list[str]:
        """The argv of one run: the harness's ``argv + [mode]``, or for a memory mode
        rss_probe.py run by the same interpreter on the same bench module."""
        if mode not in MEMORY_MODES:
            return [*self.argv, mode]
        if "-m" in self.argv:
            module = self.argv[self.argv.index("-m") + 1]
        else:
            module = Path(self.argv[-1]).stem
        return [self.argv[0], str(RSS_PROBE), module, mode]


def ledgerq_target(
    backend: str,
    url: str,
    peers_dir: Path,
    direct_url: str | None = None,
    *,
    pinned: bool = False,
) -> Target:
    """ledgerq on ``backend`` (postgresql, sqlite, mysql, postgresql-redis: the PostgreSQL
    ledger with the Redis transport, postgresql-redis-down: the same while Redis is
    unreachable, or postgresql-pgbouncer: ``url`` is a PgBouncer in transaction pooling mode
    in front of the ledger at ``direct_url``), run with this interpreter. Its workers run
    unpinned, as a user's do by default; ``pinned`` pins each to a CPU (``--pin-cpu``), under
    the key ``ledgerq_<backend>_pinned``."""
    path = os.pathsep.join(filter(None, [str(peers_dir), os.environ.get("PYTHONPATH")]))
    env = {
        "LEDGERQ_DATABASE_URL": url.format(scratch=peers_dir.parent),
        "LEDGERQ_LOG_LEVEL": "WARNING",
        "PYTHONPATH": path,
    }
    if backend.endswith("-redis"):
        env.update(LEDGERQ_REDIS_URL=BENCH_REDIS_URL, LEDGERQ_NAMESPACE="ledgerq-bench")
    elif backend.endswith("-redis-down"):
        env.update(LEDGERQ_REDIS_URL=OUTAGE_REDIS_URL, LEDGERQ_NAMESPACE="ledgerq-bench")
    elif backend.endswith("-pgbouncer"):
        env["LEDGERQ_DB_POOLER"] = "pgbouncer"
        if direct_url is not None:  # LISTEN, and creating the database
            env["LEDGERQ_DATABASE_DIRECT_URL"] = direct_url
    key = f"ledgerq_{_LABELS[backend]}{PINNED_SUFFIX if pinned else ''}"
    env["BENCH_LEDGERQ_NAME"] = key
    env["BENCH_LEDGERQ_PIN_CPU"] = "1" if pinned else "0"
    argv = (sys.executable, "-m", "ledgerq.benchmark.bench_ledgerq")
    return Target(key, argv, env)


def peer_target(name: str, python: Path) -> Target:
    """A peer's ``bench_<name>.py`` run with the peers' venv."""
    return Target(name, (str(python), f"bench_{name}.py"))


def child_env(extra: Mapping[str, str]) -> dict[str, str]:
    """Our environment without any ``LEDGERQ_*`` setting of the caller (the bench names its
    own ledgers), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}
    env.update(extra)
    return env


#: See ``Runner.watch``.
Watch = Callable[[Target, Path], AbstractContextManager[Callable[[], dict[str, Any]]]]


@dataclass
class Runner:
    """Runs targets through the harness in ``peers_dir`` and records every result."""

    peers_dir: Path
    sizes: Sizes
    results_path: Path
    timeout_seconds: float = RUN_TIMEOUT_SECONDS
    rows: list[dict[str, Any]] = field(default_factory=list)
    #: Around every measured run: given the target and its worker-pgids file, a context whose
    #: value, called after the run, returns fields to add to the result (the sweep's CPU).
    watch: Watch | None = None

    def setup(self, target: Target) -> dict[str, Any]:
        """Run the harness's ``setup`` mode (not recorded); the parsed result line."""
        return self._run(target, "setup", trial=0, timeout=self.timeout_seconds)

    def run_all(
        self,
        targets: Sequence[Target],
        modes: Sequence[str],
        trials: int,
        on_start: Callable[[str], None] = lambda _: None,
    ) -> list[dict[str, Any]]:
        """Every trial of every target and mode; ``on_start`` gets a description of each."""
        for trial in range(1, trials + 1):
            for target in targets:
                for mode in modes:
                    on_start(f"trial {trial}/{trials}  {target.key}  {mode}")
                    row = self._run(target, mode, trial, self.timeout_seconds)
                    self._record(row)
        return self.rows

    def _record(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.results_path.parent.mkdir(parents=True, exist_ok=True)
        with self.results_path.open("a") as out:
            out.write(json.dumps(row) + "\n")

    def _run(self, target: Target, mode: str, trial: int, timeout: float) -> dict[str, Any]:
        logs = self.peers_dir / "logs"
        logs.mkdir(exist_ok=True)
        pgids = logs / "worker_pgids"
        pgids.write_text("")
        env = child_env({**self.sizes.env(), **target.env, "BENCH_TRIAL": str(trial)})
        started = time.time()
        watch = self.watch if self.watch is not None and mode != "setup" else _unwatched
        with (
            watch(target, pgids) as extra,
            (logs / f"{target.key}.{mode}.t{trial}.stderr").open("w") as err,
        ):
            proc = subprocess.Popen(
                target.command(mode),
                cwd=self.peers_dir,
                env=env,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,
            )
            try:
                stdout, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_group(proc)
                stdout = ""
            except BaseException:
                stop_group(proc)  # Ctrl-C: the harness's SIGTERM handler stops its workers
                raise
            finally:
                reap(pgids, self.peers_dir)
        result = parse_result_line(stdout) or {
            "error": f"no result (exit code {proc.returncode}, timeout {timeout:.0f} s; "
            f"see {err.name})"
        }
        result.update(
            target=target.key,
            mode=mode,
            trial=trial,
            wall_s=result.get("wall_s", round(time.time() - started, 2)),
            **target.labels,
            **extra(),
        )
        return result


@contextlib.contextmanager
def _unwatched(target: Target, pgids: Path) -> Iterator[Callable[[], dict[str, Any]]]:
    yield dict


def stop_group(proc: subprocess.Popen[str]) -> None:
    """SIGTERM the harness's process group (it then stops its workers), SIGKILL after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def reap(pgids: Path, peers_dir: Path) -> None:
    """Kill worker groups a killed harness left behind: only groups it recorded, and only if
    their leader still runs one of our interpreters (a reused pid is never hit)."""
    ours = (str(peers_dir / ".venv"), str(Path(sys.executable).parent))
    for line in _lines(pgids):
        try:
            cmdline = Path(f"/proc/{line}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(prefix in cmdline for prefix in ours):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(line), signal.SIGKILL)
    pgids.write_text("")


def _lines(path: Path) -> Iterator[str]:
    if path.exists():
        yield from (
            line.strip() for line in path.read_text().splitlines() if line.strip().isdigit()
        )


@contextlib.contextmanager
def exclusive(lock_path: Path | None = None) -> Iterator[None]:
    """Hold the machine-wide bench lock for the block; raise ``BenchError`` if another bench
    holds it. Two benches at once share Redis db 15's counters and the bench databases, so
    each would count the other's jobs: overlapping runs are refused, not measured."""
    path = lock_path or Path(tempfile.gettempdir()) / "ledgerq-bench.lock"
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BenchError(
                f"another ledgerq bench is running (lock {path}); benches must not overlap"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_redis(host: str = "127.0.0.1", port: int = 6379) -> None:
    """Raise ``BenchError`` unless Redis answers PING (the harness counts completions there)."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=2.0) as sock:
            sock.sendall(b"PING\r\n")
            answer = sock.recv(64)
    except OSError as exc:
        raise BenchError(
            f"Redis is not reachable on {host}:{port} ({exc}); the harness needs it"
        ) from None
    if not answer.startswith(b"+PONG"):
        raise BenchError(f"Redis on {host}:{port} did not answer PING: {answer[:40]!r}")


def check_extra() -> None:
    """Raise ``BenchError`` when this interpreter lacks the ``bench`` extra (redis-py)."""
    import importlib.util

    if importlib.util.find_spec("redis") is None:
        raise BenchError("the bench needs redis-py here: pip install 'ledgerq[bench]'")
