"""FileSpool: the enqueue spool in a local folder (``LEDGERQ_SPOOL=file:/path``).

Layout: ``<root>/<producer>/<n>.json``, one file per entry (the jobs of one enqueue call),
``n`` zero-padded so names sort in write order. An entry is written to a dot-file, fsynced,
renamed into place and the folder fsynced, so after a crash (of the process or the host) an
entry is either whole or absent; a half-written dot-file is ignored and swept later. A
drainer removes an entry file only after its jobs committed. ``hold`` is a non-blocking
``flock`` on the producer's folder, so drainers of one host (workers, ``ledgerq spool
drain``) never replay one producer's entries at the same time. The guarantee is the disk's:
a lost or wiped disk loses its spooled jobs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from ledgerq.core import errors

_ENTRY = re.compile(r"^(\d{20})\.json$")


class FileSpool:
    """One folder of per-producer entry files; several processes of a host may share it."""

    def __init__(self, root: Path) -> None:
        """Spool under ``root`` (created on the first append)."""
        self.root = root
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def append(self, producer: str, entry: str) -> None:
        """Write ``entry`` as the producer's next file, durably (fsync of file and folder)."""
        folder = self.root / producer
        data = entry.encode()
        try:
            for _ in range(3):  # a drainer may remove the producer's empty folder meanwhile
                # Private: entries hold job arguments.
                self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
                folder.mkdir(exist_ok=True, mode=0o700)
                with self._lock:
                    n = self._next.get(producer) or self._last(producer) + 1
                    self._next[producer] = n + 1
                try:
                    self._write(folder, n, data)
                    return
                except FileNotFoundError:
                    continue
        except OSError as exc:
            raise errors.SpoolUnavailable(f"spool folder {self.root}: {exc}") from exc
        raise errors.SpoolUnavailable(f"spool folder {folder} keeps disappearing")

    @staticmethod
    def _write(folder: Path, n: int, data: bytes) -> None:
        temporary = folder / f".{n:020d}.tmp"
        final = folder / f"{n:020d}.json"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temporary, final)
        _fsync_folder(folder)

    def _last(self, producer: str) -> int:
        names = self._entries(producer)
        return int(names[-1][:20]) if names else 0

    def _entries(self, producer: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root / producer) if _ENTRY.fullmatch(n))
        except FileNotFoundError:
            return []

    def producers(self) -> list[str]:
        """Producer folders under the root (empty ones included)."""
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise errors.SpoolUnavailable(f"spool folder {self.root}: {exc}") from exc

    def peek(self, producer: str, limit: int) -> list[str]:
        """The producer's oldest ``limit`` entries."""
        folder = self.root / producer
        return [(folder / n).read_text() for n in self._entries(producer)[:limit]]

    def remove(self, producer: str, count: int) -> None:
        """Delete the producer's ``count`` oldest entry files (and fsync the folder)."""
        folder = self.root / producer
        for name in self._entries(producer)[:count]:
            (folder / name).unlink()
        _fsync_folder(folder)

    def size(self, producer: str) -> int:
        """How many entry files the producer has."""
        return len(self._entries(producer))

    @contextlib.contextmanager
    def hold(self, producer: str) -> Iterator[bool]:
        """Hold the producer's folder lock for the block if it is free; afterwards remove
        the folder if it is empty."""
        folder = self.root / producer
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            folder.mkdir(exist_ok=True, mode=0o700)  # an absent folder is locked like another
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise errors.SpoolUnavailable(f"spool folder {folder}: {exc}") from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            if not _same_folder(fd, folder):
                # Swept and made anew since we opened it: our lock guards nothing.
                yield False
                return
            yield True
            self._sweep(producer)
        finally:
            os.close(fd)

    def _sweep(self, producer: str) -> None:
        # A folder with no entries left is removed so dead producers leave nothing behind;
        # its owner, if alive, recreates it on its next append (see ``append``).
        folder = self.root / producer
        if self._entries(producer):
            return
        for name in os.listdir(folder):
            if name.startswith("."):
                with contextlib.suppress(FileNotFoundError):
                    (folder / name).unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()

    def close(self) -> None:
        """Nothing to release."""


def _same_folder(fd: int, folder: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(folder))
    except FileNotFoundError:
        return False


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
