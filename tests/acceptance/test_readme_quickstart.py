"""The README's quick start runs exactly as written, in a fresh folder: its code blocks are taken
from README.md in order and run as a user would, with the checkout's installed ``ledgerq``.

What is substituted, and only that: the install block is not run (a fresh virtualenv with every
dependency installed takes minutes and a network): the test checks that it is the documented
line with the ``/path/to/ledgerq`` placeholder, that the placeholder stands for this checkout (an
installable project named ledgerq), and that the ``ledgerq`` this test runs is installed from it;
``. .venv/bin/activate`` becomes this virtualenv's ``bin`` first on ``PATH``. Every other line
runs, in one shell session (so ``$held`` and ``$batch`` carry over), from a temporary folder with
no ``LEDGERQ_*`` variable set, so the database is the default private ``ledgerq.db`` there.
Lines that would never end on their own (``ledgerq serve``, a worker without ``--burst`` or
``--once``) would be skipped and listed; the quick start has none, and the test says so.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from collections import Counter
from pathlib import Path

import pytest

import ledgerq
from ledgerq.runtime.fetcher import BURST_HORIZON_SECONDS

REPO_ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = "/path/to/ledgerq"
INSTALL_LINES = [
    f"python3 -m venv .venv && .venv/bin/pip install {PLACEHOLDER}",
    ". .venv/bin/activate",
]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def quick_start_blocks() -> list[tuple[str, str]]:
    """The (language, code) fenced blocks of the README's "Quick start" section, in order."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(section)]


def never_ends(line: str) -> bool:
    """Whether a command line runs until stopped (a server, a worker that is not --burst)."""
    words = line.split("#", 1)[0].split()
    if words[:2] == ["ledgerq", "serve"]:
        return True
    starts_worker = words[:3] == ["ledgerq", "worker", "start"]
    return starts_worker and not {"--burst", "--once"} & set(words)


def user_env() -> dict[str, str]:
    """A user's shell after ``. .venv/bin/activate``, with no ledgerq settings of ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_")}
    venv_bin = Path(sys.executable).parent
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv_bin.parent)
    return env


def run(
    command: list[str], cwd: Path, env: dict[str, str], timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{command}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done


def check_install_block(code: str) -> None:
    """The install block is the documented one, and its placeholder is this checkout."""
    lines = [line.split("#", 1)[0].strip() for line in code.strip().splitlines()]
    assert lines == INSTALL_LINES
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "ledgerq"
    installed = Path(ledgerq.__file__).resolve()
    assert installed.is_relative_to(REPO_ROOT / "src"), f"ledgerq is installed from {installed}"
    assert (Path(sys.executable).parent / "ledgerq").exists()


def jobs_in(database: Path) -> list[tuple[int, str, str, str]]:
    """(id, task, state, args) of every job in the quick start's SQLite file."""
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT id, task, state, args FROM jobs ORDER BY id").fetchall()
    return [(int(i), str(t), str(s), str(a)) for i, t, s, a in rows]


def test_the_quick_start_runs_as_written_in_a_fresh_folder(tmp_path: Path) -> None:
    blocks = quick_start_blocks()
    assert [language for language, _ in blocks] == ["sh", "python", "sh", "python"]
    (_, install), (_, tasks_py), (_, commands), (_, from_python) = blocks
    check_install_block(install)
    (tmp_path / "tasks.py").write_text(tasks_py)
    env = user_env()

    lines = [line for line in commands.splitlines() if line.strip()]
    skipped = [line for line in lines if never_ends(line)]
    assert skipped == []  # nothing in the quick start runs forever; if it did, it is listed here
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    shell = run(["bash", "-c", script], tmp_path, env)

    database = tmp_path / "ledgerq.db"  # the default: the folder's own SQLite file
    jobs = jobs_in(database)
    by_task = Counter((task, state) for _, task, state, _ in jobs)
    # 42, the held 43 (started by the id it printed) and the batch's three: all ran, and the
    # --delay 5 report ran inside the same --burst run.
    assert by_task == {("tasks.send_sms", "succeeded"): 5, ("tasks.build_report", "succeeded"): 1}
    assert '"state": "succeeded"' in shell.stdout  # job show of the held job, by its id
    assert "3/3" in shell.stdout  # batch show of the batch created above

    (tmp_path / "enqueue.py").write_text(from_python)
    python = run(["python", "enqueue.py"], tmp_path, env)
    job_id, duplicate, state = python.stdout.split()
    assert duplicate == "False" and state == "scheduled"
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT id FROM orders").fetchall() == [(7,)]
        retried = conn.execute("SELECT state FROM jobs WHERE id = ?", (int(job_id),)).fetchone()
    assert retried == ("queued",)  # cancelled, then retried: due now
    assert len(jobs_in(database)) == len(jobs) + 6  # two jobs, three in bulk, one in the tx


def test_the_burst_horizon_the_readme_states_is_the_one_the_worker_uses() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert f"due within {BURST_HORIZON_SECONDS:g} seconds" in readme
    done = run(
        [sys.executable, "-m", "ledgerq.cli.main", "worker", "start", "--help"],
        REPO_ROOT,
        user_env(),
    )
    assert f"due within {BURST_HORIZON_SECONDS:g} s" in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("line", "ends"),
    [
        ("ledgerq worker start --queues sms --burst   # --burst: see below", True),
        ("ledgerq worker start --once", True),
        ("ledgerq worker start --concurrency 8", False),
        ("ledgerq serve", False),
        ("ledgerq job list", True),
    ],
)
def test_lines_that_never_end_are_recognised(line: str, ends: bool) -> None:
    assert never_ends(line) is not ends
