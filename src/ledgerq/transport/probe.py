"""A Redis readiness probe over a plain socket (RESP ``PING``), so health checks need no Redis
client library and never touch the transport's connections."""

from __future__ import annotations

import socket
import urllib.parse

from ledgerq.core.operations import ProbeResult

#: Seconds a readiness check may wait for Redis.
PROBE_TIMEOUT_SECONDS = 2.0


def _command(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


class RedisPingProbe:
    """Checks that the Redis of ``url`` answers PING (after AUTH when the URL has a password)."""

    name = "redis"

    def __init__(self, url: str) -> None:
        self._url = urllib.parse.urlsplit(url)

    def check(self) -> ProbeResult:
        """PING Redis now; never raises. TLS URLs (rediss://) are only checked for a TCP
        connection."""
        host = self._url.hostname or "127.0.0.1"
        port = self._url.port or 6379
        try:
            with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_SECONDS) as sock:
                if self._url.scheme == "rediss":
                    return ProbeResult(self.name, True, "tcp reachable")
                if self._url.password:
                    user = urllib.parse.unquote(self._url.username or "default")
                    sock.sendall(_command("AUTH", user, urllib.parse.unquote(self._url.password)))
                    sock.recv(256)
                sock.sendall(_command("PING"))
                reply = sock.recv(256)
        except OSError as exc:
            return ProbeResult(self.name, False, f"unreachable: {exc}")
        if reply.startswith(b"+PONG"):
            return ProbeResult(self.name, True)
        return ProbeResult(self.name, False, reply.decode(errors="replace").strip()[:200])
