"""Reading the shipped deployment files the way their tools do, and running what they say.

systemd units and environment files are parsed here (sections, ``KEY=value``, ``%i``
specifiers, ``${VAR}`` / ``$VAR`` expansion in ``ExecStart=``), so the tests run exactly the
command line a unit would run. ``Services`` starts those processes in their own process
groups and kills what is left at the end of the test.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
#: The ``ledgerq`` console script of the interpreter running the tests (the units name
#: /opt/ledgerq/venv/bin/ledgerq; the tests run this one in its place).
LEDGERQ = str(Path(sys.executable).parent / "ledgerq")


def need_tool(name: str) -> str:
    """The path of ``name``, or skip (fail under CI, which installs it) if it is missing."""
    found = shutil.which(name) or next(
        (p for d in ("/usr/sbin", "/sbin") if os.path.exists(p := f"{d}/{name}")), None
    )
    if found is None:
        message = f"{name} is not installed (Debian package; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit's sections, each a list of (key, value) in file order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        while line.endswith("\\"):  # a continued line
            line = line[:-1] + " " + next(lines, "").strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], [])
            continue
        assert current is not None, f"a setting before any section: {line!r}"
        key, _, value = line.partition("=")
        current.append((key.strip(), value.strip()))
    return sections


def unit_value(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    """The one value of ``key`` in ``section`` (fails if it is missing or repeated)."""
    (value,) = [v for k, v in unit[section] if k == key]
    return value


def read_env_file(text: str) -> dict[str, str]:
    """An ``EnvironmentFile=``: ``KEY=value`` lines, ``#`` and ``;`` comments, optional quotes."""
    env: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()), line
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        env[key.strip()] = value
    return env


def specifiers(text: str, instance: str) -> str:
    """Replace the specifiers the shipped units use: ``%i``/``%I`` (instance) and ``%%``."""
    out = text.replace("%%", "\0").replace("%i", instance).replace("%I", instance)
    assert "%" not in out, f"a specifier this test does not know: {text!r}"
    return out.replace("\0", "%")


def exec_argv(line: str, env: Mapping[str, str], instance: str) -> list[str]:
    """``ExecStart=`` as systemd runs it: specifiers, then words; a ``${VAR}`` inside a word
    becomes the value, a word that is just ``$VAR`` becomes the value's words."""
    argv: list[str] = []
    for word in shlex.split(specifiers(line, instance)):
        alone = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if alone:
            argv += env.get(alone.group(1), "").split()
            continue
        argv.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m[1], ""), word))
    return argv


def substitute(text: str, old: str, new: str, count: int = 1) -> str:
    """``text`` with ``old`` (a regex) replaced; fails unless it occurs ``count`` times, so a
    change to the shipped file shows up here rather than being silently skipped."""
    found = len(re.findall(old, text, flags=re.MULTILINE))
    assert found == count, f"{old!r} occurs {found} times in the shipped file, not {count}"
    return re.sub(old, new.replace("\\", "\\\\"), text, flags=re.MULTILINE)


def with_local_ledgerq(argv: Sequence[str]) -> list[str]:
    """``argv`` with the deployed ``.../bin/ledgerq`` replaced by this checkout's."""
    assert argv and argv[0].endswith("/bin/ledgerq"), argv
    return [LEDGERQ, *argv[1:]]


def free_port_block(count: int) -> int:
    """A ``prefix`` such that ports ``prefix * 100 + n`` (n < ``count``) are all free, for
    files that form ports as ``<prefix><two digits>`` (supervisor's ``91%(process_num)02d``)."""
    for prefix in range(200, 320):  # ports 20000-31999: below the ephemeral range
        ports = [prefix * 100 + n for n in range(count)]
        if all(_bindable(port) for port in ports):
            return prefix
    raise RuntimeError("no free block of ports")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def http_status(
    url: str,
    *,
    method: str = "GET",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,
) -> int:
    """The status of one request (redirects not followed, TLS not verified); 0 if nothing
    answers."""
    return http_request(url, method=method, data=data, headers=headers, timeout=timeout)[0]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def http_request(
    url: str,
    *,
    method: str = "GET",
    data: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names; Set-Cookie values joined by newlines) and body."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
    try:
        with opener.open(request, timeout=timeout) as response:
            return int(response.status), _headers(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), _headers(exc.headers), exc.read()
    except (OSError, http.client.HTTPException):  # not listening (yet)
        return 0, {}, b""


def _headers(message: object) -> dict[str, str]:
    items = getattr(message, "items", lambda: [])()
    out: dict[str, str] = {}
    for name, value in items:
        key = name.lower()
        out[key] = f"{out[key]}\n{value}" if key in out else value
    return out


class Services:
    """Long-running processes of one test (each in its own process group, output in a file);
    ``kill_all`` ends every group still alive."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` with exactly ``env``; its stdout and stderr go to a log file."""
        log_path = self._dir / f"service-{len(self._procs)}-{Path(argv[0]).name}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._procs.append((popen, log_path))
        return popen

    def log(self, popen: subprocess.Popen[bytes]) -> str:
        """What ``popen`` wrote so far."""
        (path,) = [p for proc, p in self._procs if proc is popen]
        return path.read_text(errors="replace")

    def stop(self, popen: subprocess.Popen[bytes], timeout: float = 20.0) -> int:
        """SIGTERM (what systemd, supervisor and docker send) and the exit code."""
        popen.send_signal(signal.SIGTERM)
        try:
            return popen.wait(timeout)
        except subprocess.TimeoutExpired:
            message = f"still running after SIGTERM:\n{self.log(popen)[-3000:]}"
            raise AssertionError(message) from None

    def kill_all(self) -> None:
        """SIGKILL each process group still alive."""
        for popen, _ in self._procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()


def base_env(**extra: str) -> dict[str, str]:
    """The few variables a service manager gives a process (no LEDGERQ_* of the test run)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    env.update(extra)
    return env
