"""The ``--pin-cpu`` lock folder is private to the user: it lives in ``<tempdir>`` under a
per-user name with mode 0700, a folder that is a symlink, belongs to someone else or is
writable by group or others is not used (the worker runs unpinned and says why), and a symlink
planted where a lock file goes is never followed."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from ledgerq.runtime import affinity

ALLOWED = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []

pytestmark = pytest.mark.skipif(
    len(ALLOWED) < 2, reason="pinning needs Linux CPU affinity and at least two CPUs"
)


@pytest.fixture(autouse=True)
def keep_affinity() -> Iterator[None]:
    """A claim pins every thread of this process: give them their CPUs back afterwards."""
    before = os.sched_getaffinity(0)
    yield
    for name in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(name), before)


def private_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    return folder


def warnings_of(logs: list[dict[str, object]]) -> str:
    return " ".join(str(e["event"]) for e in logs if e["log_level"] == "warning")


def test_the_default_folder_is_per_user_and_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = affinity.default_lock_folder()
    assert folder == tmp_path / f"ledgerq-cpu-locks-{os.getuid()}"
    claim = affinity.claim_cpu()
    assert claim is not None
    try:
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        lock = folder / f"cpu{claim.cpu}.lock"
        assert stat.S_IMODE(lock.lstat().st_mode) == 0o600
    finally:
        claim.release()


def test_a_symlink_planted_as_a_lock_file_is_not_followed(tmp_path: Path) -> None:
    folder = private_folder(tmp_path)
    victims = {cpu: tmp_path / f"victim-{cpu}" for cpu in ALLOWED}
    for cpu, victim in victims.items():
        (folder / f"cpu{cpu}.lock").symlink_to(victim)
    existing = tmp_path / "precious"
    existing.write_text("keep me")
    (folder / f"cpu{ALLOWED[0]}.lock").unlink()
    (folder / f"cpu{ALLOWED[0]}.lock").symlink_to(existing)
    with capture_logs() as logs:
        claim = affinity.claim_cpu(folder)
    assert claim is None  # every lock file is a link: no CPU is claimed through one
    assert not any(v.exists() for cpu, v in victims.items() if cpu != ALLOWED[0])
    assert existing.read_text() == "keep me"
    assert "symlink" in warnings_of(logs)


def test_a_symlinked_folder_is_not_used(tmp_path: Path) -> None:
    real = private_folder(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(real)
    with capture_logs() as logs:
        assert affinity.claim_cpu(link) is None
    assert list(real.iterdir()) == []
    assert "lock folder" in warnings_of(logs)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o770, 0o702])
def test_a_folder_others_may_write_to_is_not_used(tmp_path: Path, mode: int) -> None:
    folder = private_folder(tmp_path)
    folder.chmod(mode)
    with capture_logs() as logs:
        assert affinity.claim_cpu(folder) is None
    assert list(folder.iterdir()) == []
    assert stat.S_IMODE(folder.stat().st_mode) == mode  # left as it was, not "repaired"
    assert "writable" in warnings_of(logs)


def test_a_folder_of_another_user_is_not_used(tmp_path: Path) -> None:
    if os.getuid() == 0:
        folder = private_folder(tmp_path)
        os.chown(folder, 65534, 65534)  # nobody
    else:
        folder = Path("/")  # root's, and not writable for this user anyway
    before = sorted(p.name for p in folder.iterdir())
    with capture_logs() as logs:
        assert affinity.claim_cpu(folder) is None
    assert sorted(p.name for p in folder.iterdir()) == before
    assert "owned by" in warnings_of(logs)
