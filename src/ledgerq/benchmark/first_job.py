"""Start-up probe: the time from exec of ``ledgerq worker start --once`` to the start of the
body of the one job already waiting for it, to the worker's exit, and the worker's CPU time,
over alternating runs of one or more ``ledgerq`` executables (so an old and a new tree are
compared as pairs), optionally beside dramatiq's worker (``first_job_dramatiq.py``).

Run as ``python -m ledgerq.benchmark.first_job --database-url URL [--ledgerq PATH ...]
[--dramatiq PEERS_PYTHON]``. The probe's application is a file it writes to a scratch folder
(not a ledgerq module), so an older ledgerq tree runs exactly the same job. The ledger is
migrated first; the probe's jobs go to their own queue (``first-job``).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ledgerq.benchmark import first_job_dramatiq
from ledgerq.core import errors

#: The queue and task of the probe's jobs.
QUEUE = "first-job"
TASK = "probe.first_job"
#: Longest one worker run may take before the probe gives up on it, in seconds.
RUN_TIMEOUT_SECONDS = 60.0

#: One start-up: (exec -> job body start, exec -> exit or None, CPU seconds or None).
Sample = tuple[float, float | None, float | None]

_APP_SOURCE = f'''"""The start-up probe's application: one task that writes when its body began."""
import time

from ledgerq import LedgerQ

app = LedgerQ()


@app.task(name="{TASK}", queue="{QUEUE}", max_attempts=1)
def first_job(ctx, path):
    stamp = repr(time.time())
    with open(path, "w") as out:
        out.write(stamp)
'''


def load_app(folder: Path, database_url: str) -> Any:
    """Write the probe's application module into ``folder`` and import it, pointed at
    ``database_url``."""
    path = folder / "first_job_app.py"
    path.write_text(_APP_SOURCE)
    spec = importlib.util.spec_from_file_location("first_job_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.app.reconfigure(database_url=database_url)
    return module


def children_cpu() -> float:
    """User + system CPU seconds of every waited-for child so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_ledgerq(ledgerq: str, probe: Any, folder: Path, env: dict[str, str]) -> Sample:
    """Enqueue one job, exec ``ledgerq worker start --once`` and wait for it to exit. Raises
    ``RuntimeError`` if the worker fails or never runs the job."""
    stamp = folder / "started"
    stamp.unlink(missing_ok=True)
    probe.first_job.enqueue(str(stamp))
    argv = [ledgerq, "--app", "first_job_app:app", "worker", "start", "--once"]
    argv += ["--queues", QUEUE, "--concurrency", "1"]
    cpu_before = children_cpu()
    launched = time.time()
    done = subprocess.run(
        argv, env=env, cwd=folder, capture_output=True, timeout=RUN_TIMEOUT_SECONDS, check=False
    )
    exited = time.time()
    if done.returncode != 0 or not stamp.exists():
        raise RuntimeError(
            f"{ledgerq} exited {done.returncode} without running the job: {done.stderr[-400:]!r}"
        )
    return float(stamp.read_text()) - launched, exited - launched, children_cpu() - cpu_before


def _summary(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    return f"median {statistics.median(ms):.0f} ms, min {ms[0]:.0f}, max {ms[-1]:.0f} (n={len(ms)})"


def _report(name: str, samples: list[Sample]) -> None:
    print(name)
    print(f"  exec -> first job body: {_summary([s[0] for s in samples])}")
    exits = [s[1] for s in samples if s[1] is not None]
    if exits:
        print(f"  exec -> exit (--once):  {_summary(exits)}")
    cpu = [s[2] for s in samples if s[2] is not None]
    if cpu:
        print(f"  CPU (user + system):    {_summary(cpu)}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ledgerq.benchmark.first_job")
    parser.add_argument("--database-url", required=True, help="The ledger (migrated first).")
    parser.add_argument(
        "--ledgerq",
        action="append",
        help="A ledgerq executable; repeat to alternate several (default: this one's).",
    )
    parser.add_argument(
        "--dramatiq",
        metavar="PYTHON",
        help="Also start dramatiq's worker with this interpreter (the peers' venv).",
    )
    parser.add_argument(
        "--redis-url",
        default=first_job_dramatiq.DEFAULT_REDIS_URL,
        help="dramatiq's broker. Defaults to %(default)s.",
    )
    parser.add_argument("--runs", type=int, default=15, help="Rounds. Defaults to 15.")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run the rounds, print each contender's medians; 0, or 1 on failure
    (one line on stderr: an unreachable ledger, a missing executable, a worker that failed)."""
    args = _parser().parse_args(argv)
    try:
        samples = _measure(args)
    except (errors.LedgerqError, OSError, RuntimeError, subprocess.SubprocessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, taken in samples.items():
        _report(name, taken)
    return 0


def _measure(args: argparse.Namespace) -> dict[str, list[Sample]]:
    """Every round of every contender, interleaved."""
    executables = args.ledgerq or [str(Path(sys.executable).with_name("ledgerq"))]
    with tempfile.TemporaryDirectory(prefix="ledgerq-first-job-") as scratch:
        folder = Path(scratch)
        probe = load_app(folder, args.database_url)
        try:
            return _rounds(args, executables, folder, probe)
        finally:
            probe.app.close()  # its pool's connections, not left to the garbage collector


def _rounds(
    args: argparse.Namespace, executables: list[str], folder: Path, probe: Any
) -> dict[str, list[Sample]]:
    """Migrate the probe's ledger, then run every contender ``args.runs`` times, interleaved."""
    probe.app.migrate()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}
    env.update(
        LEDGERQ_DATABASE_URL=args.database_url,
        LEDGERQ_LOG_LEVEL="WARNING",
        PYTHONPATH=str(folder),
    )
    contenders: dict[str, Callable[[], Sample]] = {
        exe: functools.partial(run_ledgerq, exe, probe, folder, env) for exe in executables
    }
    if args.dramatiq:
        peer = first_job_dramatiq.DramatiqProbe(args.dramatiq, folder, args.redis_url)
        contenders[f"dramatiq ({args.dramatiq})"] = peer.run
    samples: dict[str, list[Sample]] = {name: [] for name in contenders}
    for _ in range(args.runs):
        for name, run in contenders.items():
            samples[name].append(run())
    return samples


if __name__ == "__main__":
    sys.exit(main())
