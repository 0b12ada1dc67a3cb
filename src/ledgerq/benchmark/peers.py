"""The peers' folder: found beside the repository (read-only), copied to a scratch folder the
bench owns, and set up there once with its own ``setup.sh`` (role, databases, venv, schemas).

The copy keeps the peers' ``.venv``, ``logs`` and ``results`` between runs; only the scripts are
refreshed, so a changed harness is picked up without reinstalling anything. The project's own
extra peers (``peers_extra/bench_*.py``, e.g. huey on SQLite) are copied beside them, so the
harness and the peers' venv run them like the others; a peer of the same name in the peers'
folder wins.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ledgerq.benchmark import BenchError

#: The seven peers of ../shared/bench/peers, in the order of its RESULTS.md.
DEFAULT_PEERS = ("rq", "celery", "dramatiq", "arq", "procrastinate", "pgqueuer", "huey")
#: Longest ``setup.sh`` may take; the first run installs the peers' venv from the registry.
SETUP_TIMEOUT_SECONDS = 1200.0
_KEEP = {".venv", "logs", "results", "__pycache__"}
#: The project's own peers, written to the harness protocol and copied beside the others.
EXTRA_PEERS_DIR = Path(__file__).resolve().parent / "peers_extra"


def default_scratch() -> Path:
    """``$XDG_CACHE_HOME/ledgerq-bench`` (``~/.cache/ledgerq-bench`` by default)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ledgerq-bench"


def find_source(explicit: Path | None = None) -> Path:
    """The peers' folder: ``explicit``, else ``shared/bench/peers`` beside the working directory
    or beside this checkout. Raises ``BenchError`` when none holds a ``harness.py``."""
    repo = Path(__file__).resolve().parents[3]
    candidates = (
        [explicit]
        if explicit
        else [
            Path.cwd().parent / "shared" / "bench" / "peers",
            repo.parent / "shared" / "bench" / "peers",
        ]
    )
    for candidate in candidates:
        if candidate is not None and (candidate / "harness.py").is_file():
            return candidate
    shown = ", ".join(str(c) for c in candidates if c is not None)
    raise BenchError(
        f"the peers' harness (harness.py) was not found in {shown}; use --peers-source DIR"
    )


def sync(source: Path, scratch: Path, extra: Path = EXTRA_PEERS_DIR) -> Path:
    """Copy the peers' scripts from ``source`` to ``scratch/peers`` (made writable), then the
    ``bench_*.py`` of ``extra`` that ``source`` has no file of the same name for; return it."""
    dest = scratch / "peers"
    dest.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name in _KEEP:
            continue
        target = dest / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True, copy_function=shutil.copyfile)
            # copytree copies the source's read-only directory modes; ours must be writable.
            for sub in [target, *target.rglob("*")]:
                sub.chmod(0o755 if sub.is_dir() else 0o644)
        else:
            shutil.copyfile(item, target)
            target.chmod(0o755 if os.access(item, os.X_OK) else 0o644)
    for peer in sorted(extra.glob("bench_*.py")):
        if not (source / peer.name).exists():
            shutil.copyfile(peer, dest / peer.name)
            (dest / peer.name).chmod(0o644)
    dest.chmod(0o755)
    (dest / "logs").mkdir(exist_ok=True)
    return dest


def available(peers_dir: Path) -> list[str]:
    """Every peer the folder has a ``bench_<peer>.py`` for (variants included)."""
    return sorted(p.stem.removeprefix("bench_") for p in peers_dir.glob("bench_*.py"))


def venv_python(peers_dir: Path) -> Path:
    """The interpreter of the peers' venv."""
    return peers_dir / ".venv" / "bin" / "python"


def set_up(peers_dir: Path) -> str | None:
    """Run the peers' idempotent ``setup.sh``; None on success, else a one-line reason.

    Its output goes to ``setup.log`` in the folder. It installs and starts services only when
    they are missing, so on a machine with them running it only creates the ``bench`` role,
    the peers' databases, the venv (first time) and the peers' schemas.
    """
    log_path = peers_dir / "logs" / "setup.log"
    try:
        with log_path.open("w") as log:
            done = subprocess.run(
                ["bash", "setup.sh"],
                cwd=peers_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=SETUP_TIMEOUT_SECONDS,
                check=False,
            )
    except subprocess.TimeoutExpired:
        return f"setup.sh took over {SETUP_TIMEOUT_SECONDS:.0f} s (log: {log_path})"
    except OSError as exc:
        return f"setup.sh could not run: {exc}"
    if done.returncode != 0:
        return f"setup.sh failed with exit code {done.returncode} (log: {log_path})"
    if not venv_python(peers_dir).exists():
        return f"setup.sh left no venv at {venv_python(peers_dir)} (log: {log_path})"
    return None
