"""supervisord runs the shipped program file: it keeps the worker processes up (each healthy on
its own health port) and ``serve`` with them, and starts a worker again when one is killed.

The shipped file is used as written except where a test host differs from the deployment:
the ledgerq binary, the working directory, the user, the log folder, the database URL, the
ports (free ones) and the number of workers (two, to keep the test short)."""

from __future__ import annotations

import getpass
import os
import signal
import subprocess
from pathlib import Path

from tests.deploy.deploy_files import (
    DEPLOY,
    LEDGERQ,
    Services,
    base_env,
    free_port_block,
    http_status,
    need_tool,
    substitute,
)
from tests.helpers import wait_until
from tests.redis_server import free_port

WORKERS = 2


def program_file(tmp_path: Path, app_dir: Path, url: str, prefix: int, serve_port: int) -> Path:
    """The shipped deploy/supervisor/ledgerq.conf adapted to this host."""
    text = (DEPLOY / "supervisor" / "ledgerq.conf").read_text()
    text = substitute(text, r"/opt/ledgerq/venv/bin/ledgerq ", f"{LEDGERQ} ", count=2)
    text = substitute(
        text, r"--health-port 91%\(process_num\)02d", f"--health-port {prefix}%(process_num)02d"
    )
    text = substitute(text, r"--port 8000$", f"--port {serve_port}")
    text = substitute(text, r"^numprocs=4$", f"numprocs={WORKERS}")
    text = substitute(text, r"^directory=/opt/ledgerq/app$", f"directory={app_dir}", count=2)
    text = substitute(text, r"^user=ledgerq$", f"user={getpass.getuser()}", count=2)
    text = substitute(text, r"/var/log/ledgerq/", f"{tmp_path}/", count=2)
    # supervisor expands %(name)s in values: a literal % of the URL is written %%.
    text = substitute(
        text, r'LEDGERQ_DATABASE_URL="[^"]*"', f'LEDGERQ_DATABASE_URL="{url.replace("%", "%%")}"', 2
    )
    path = tmp_path / "ledgerq.conf"
    path.write_text(text)
    return path


def supervisord_conf(tmp_path: Path, program: Path) -> Path:
    """A supervisord of the test's own: socket, pid file and logs in ``tmp_path``."""
    conf = tmp_path / "supervisord.conf"
    conf.write_text(
        f"[unix_http_server]\nfile={tmp_path}/supervisor.sock\n\n"
        f"[supervisord]\nnodaemon=true\nlogfile={tmp_path}/supervisord.log\n"
        f"pidfile={tmp_path}/supervisord.pid\nchildlogdir={tmp_path}\nuser={getpass.getuser()}\n\n"
        "[rpcinterface:supervisor]\n"
        "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface\n\n"
        f"[supervisorctl]\nserverurl=unix://{tmp_path}/supervisor.sock\n\n"
        f"[include]\nfiles={program}\n"
    )
    return conf


def test_supervisord_keeps_workers_up_and_restarts_a_killed_one(
    pg_url: str, app_dir: Path, services: Services, tmp_path: Path
) -> None:
    supervisord = need_tool("supervisord")
    supervisorctl = need_tool("supervisorctl")
    prefix, serve_port = free_port_block(WORKERS), free_port()
    program = program_file(tmp_path, app_dir, pg_url, prefix, serve_port)
    conf = supervisord_conf(tmp_path, program)
    # TMPDIR: the workers' --pin-cpu lock folder is theirs, not shared with parallel tests.
    daemon = services.start([supervisord, "-c", str(conf)], env=base_env(TMPDIR=str(tmp_path)))

    def ctl(*args: str) -> str:
        result = subprocess.run(
            [supervisorctl, "-c", str(conf), *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return result.stdout

    def pid(name: str) -> int:
        found = ctl("pid", f"ledgerq:{name}").strip()
        return int(found) if found.isdigit() else 0

    health = [f"http://127.0.0.1:{prefix * 100 + n}/health/live" for n in range(WORKERS)]
    urls = [*health, f"http://127.0.0.1:{serve_port}/health/live"]

    def all_healthy() -> bool:
        return all(http_status(url) == 200 for url in urls) or daemon.poll() is not None

    try:
        wait_until(all_healthy, timeout=60, interval=0.1, what="every program healthy")
        assert daemon.poll() is None, services.log(daemon)
        names = [f"ledgerq-worker_{n:02d}" for n in range(WORKERS)]
        pids = {name: pid(name) for name in names}
        assert all(pids.values()), ctl("status")

        victim = names[0]
        os.kill(pids[victim], signal.SIGKILL)
        wait_until(
            lambda: pid(victim) not in (0, pids[victim]), timeout=30, interval=0.2, what="restarted"
        )
        wait_until(all_healthy, timeout=60, interval=0.1, what="healthy again")
        assert pid(names[1]) == pids[names[1]]  # the others were left alone
        assert "ledgerq-worker_00" in ctl("status")

        # Stopping supervisord stops every program with SIGTERM (graceful).
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(60) == 0, services.log(daemon)
        for name in names[1:]:
            assert not Path(f"/proc/{pids[name]}").exists()
        logs = "".join(p.read_text() for p in tmp_path.glob("ledgerq-worker_*.log"))
        assert "Traceback" not in logs and "unknown setting" not in logs, logs[-3000:]
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(60)
