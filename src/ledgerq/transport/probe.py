"""A Redis readiness probe over a plain socket (RESP), so health checks need no Redis client
library and never touch the transport's connections. For a ``redis+sentinel://`` URL it asks
the sentinels where the master is (``SENTINEL GET-MASTER-ADDR-BY-NAME``), then PINGs that."""

from __future__ import annotations

import socket
import urllib.parse

from ledgerq.core import redis_url
from ledgerq.core.operations import ProbeResult

#: Seconds a readiness check may wait for Redis.
PROBE_TIMEOUT_SECONDS = 2.0


def _command(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


def _master_address(reply: bytes) -> tuple[str, int] | None:
    """The ``[host, port]`` array of a sentinel's reply; None for a nil or an error."""
    lines = reply.split(b"\r\n")
    if len(lines) < 5 or lines[0] != b"*2":
        return None
    try:
        return lines[2].decode(), int(lines[4])
    except (UnicodeDecodeError, ValueError):
        return None


def _ask(address: tuple[str, int], commands: list[tuple[str, ...]], timeout: float) -> bytes:
    """Send ``commands`` on one connection and return the last one's reply (its first read).
    Raises ``OSError``."""
    with socket.create_connection(address, timeout=timeout) as sock:
        reply = b""
        for command in commands:
            sock.sendall(_command(*command))
            reply = sock.recv(512)
        return reply


def _auth(username: str | None, password: str | None) -> list[tuple[str, ...]]:
    if not password:
        return []
    return [("AUTH", username or "default", password)]


class RedisPingProbe:
    """Checks that the Redis of ``url`` answers PING (after AUTH when the URL has a password);
    for a Sentinel URL, the master the sentinels name."""

    name = "redis"

    def __init__(self, url: str) -> None:
        self._sentinel = (
            redis_url.parse_sentinel_url(url) if redis_url.is_sentinel_url(url) else None
        )
        self._url = urllib.parse.urlsplit(url)

    def check(self) -> ProbeResult:
        """PING Redis now; never raises. TLS URLs (rediss://) are only checked for a TCP
        connection."""
        if self._sentinel is not None:
            return self._check_sentinel(self._sentinel)
        host = self._url.hostname or "127.0.0.1"
        port = self._url.port or 6379
        try:
            if self._url.scheme == "rediss":
                socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SECONDS).close()
                return ProbeResult(self.name, True, "tcp reachable")
            password = self._url.password and urllib.parse.unquote(self._url.password)
            user = urllib.parse.unquote(self._url.username or "") or None
            reply = _ask((host, port), [*_auth(user, password), ("PING",)], PROBE_TIMEOUT_SECONDS)
        except OSError as exc:
            return ProbeResult(self.name, False, f"unreachable: {exc}")
        return self._judge(reply)

    def _check_sentinel(self, target: redis_url.SentinelTarget) -> ProbeResult:
        """Ask the sentinels in turn for the master, then PING it."""
        ask = ("SENTINEL", "GET-MASTER-ADDR-BY-NAME", target.service_name)
        problems: list[str] = []
        for sentinel in target.sentinels:
            try:
                login = _auth(target.sentinel_username, target.sentinel_password)
                answer = _ask(sentinel, [*login, ask], PROBE_TIMEOUT_SECONDS)
            except OSError as exc:
                problems.append(f"sentinel {sentinel[0]}:{sentinel[1]} unreachable: {exc}")
                continue
            master = _master_address(answer)
            if master is None:
                said = answer.decode(errors="replace").strip()[:100] if answer[:1] == b"-" else ""
                problems.append(f"sentinel {sentinel[0]}:{sentinel[1]} names no master {said}")
                continue
            try:
                login = _auth(target.username, target.password)
                reply = _ask(master, [*login, ("PING",)], PROBE_TIMEOUT_SECONDS)
            except OSError as exc:
                return ProbeResult(self.name, False, f"master {master[0]}:{master[1]}: {exc}")
            return self._judge(reply, f"master {master[0]}:{master[1]}")
        return ProbeResult(self.name, False, "; ".join(problems)[:300])

    def _judge(self, reply: bytes, detail: str = "") -> ProbeResult:
        if reply.startswith(b"+PONG"):
            return ProbeResult(self.name, True, detail)
        return ProbeResult(self.name, False, reply.decode(errors="replace").strip()[:200])
