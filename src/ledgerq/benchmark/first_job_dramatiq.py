"""dramatiq's side of the start-up probe (``first_job.py``): the time from exec of
``dramatiq APP --processes 1 --threads 1`` to the start of the body of the one message already
waiting for it, run with the peers' interpreter (dramatiq is not a dependency of ledgerq).
dramatiq has no mode that exits when its queue is empty, so the worker is stopped (SIGTERM,
then SIGKILL) once the body began; only the time to the body is comparable.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: dramatiq's broker for the probe: a Redis database the peers' harness never flushes.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
#: The probe's queue on that broker.
QUEUE = "ledgerq-first-job-probe"
#: Longest wait for the body to start, in seconds.
START_TIMEOUT_SECONDS = 60.0

_APP_SOURCE = f'''"""The start-up probe's dramatiq app: one actor that writes when it ran."""
import os
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

dramatiq.set_broker(RedisBroker(url=os.environ["FIRST_JOB_REDIS_URL"]))


@dramatiq.actor(queue_name="{QUEUE}", max_retries=0)
def first_job(path):
    stamp = repr(time.time())
    with open(path, "w") as out:
        out.write(stamp)
'''


@dataclass
class DramatiqProbe:
    """Starts dramatiq's worker with ``python`` (a venv with dramatiq and redis-py) on an
    application written into ``folder``."""

    python: str
    folder: Path
    redis_url: str = DEFAULT_REDIS_URL

    def __post_init__(self) -> None:
        (self.folder / "first_job_dramatiq_app.py").write_text(_APP_SOURCE)
        bin_dir = str(Path(self.python).parent)
        self.env = dict(
            os.environ,
            FIRST_JOB_REDIS_URL=self.redis_url,
            PYTHONPATH=str(self.folder),
            PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""),
        )

    def run(self) -> tuple[float, None, None]:
        """Send one message, exec the worker, wait for the body; (exec -> body, None, None).
        Raises ``RuntimeError`` if the body does not start within the bound."""
        stamp = self.folder / "dramatiq-started"
        stamp.unlink(missing_ok=True)
        send = f"import first_job_dramatiq_app as m; m.first_job.send({str(stamp)!r})"
        subprocess.run([self.python, "-c", send], env=self.env, check=True, timeout=60)
        argv = [self.python, "-m", "dramatiq", "first_job_dramatiq_app"]
        argv += ["--processes", "1", "--threads", "1", "--queues", QUEUE]
        launched = time.time()
        worker = subprocess.Popen(
            argv,
            env=self.env,
            cwd=self.folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_SECONDS
            while not stamp.exists() or not stamp.read_text():
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise RuntimeError(f"dramatiq did not start the job (exit {worker.poll()})")
                time.sleep(0.005)
            return float(stamp.read_text()) - launched, None, None
        finally:
            _stop(worker)


def _stop(worker: subprocess.Popen[bytes]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(worker.pid, sig)
        except ProcessLookupError:
            return
        try:
            worker.wait(10)
            return
        except subprocess.TimeoutExpired:
            continue
