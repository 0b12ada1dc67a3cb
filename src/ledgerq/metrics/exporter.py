"""HealthExporter: a worker's own small HTTP endpoint (``worker start --health-port``) with
``/health/live``, ``/health/ready`` and ``/metrics``, served by one asyncio loop in a daemon
thread.

One loop serves every connection, so idle or slow clients cost a socket each, never a thread;
each connection must send its request head within ``timeout_seconds`` and at most
``max_connections`` are open at once (more are closed at once), so neither can starve the
probe that decides whether the worker lives."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus

import structlog

log = structlog.get_logger("ledgerq.exporter")
#: Longest request head read; probes and scrapers send a few hundred bytes.
MAX_HEAD_BYTES = 8192

#: Readiness checks by name, each (ok, detail).
Readiness = Mapping[str, tuple[bool, str]]


class HealthExporter:
    """Serves ``GET /health/live`` (200 while ``is_alive()``, else 503), ``GET /health/ready``
    (200 when every check of ``is_ready()`` passes, else 503; the body names each check, as
    ``serve``'s does; without ``is_ready`` it follows ``is_alive``) and ``GET /metrics`` (from
    ``render``). Binds ``host:port`` at construction (port 0 picks a free port, see
    ``port``); raises ``OSError`` if the port is taken."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        is_alive: Callable[[], bool],
        render: Callable[[], tuple[bytes, str]],
        timeout_seconds: float = 10.0,
        max_connections: int = 64,
        is_ready: Callable[[], Readiness] | None = None,
    ) -> None:
        self._is_alive = is_alive
        self._is_ready = is_ready or (lambda: {"alive": (is_alive(), "")})
        self._render = render
        self._timeout = timeout_seconds
        self._max_connections = max_connections
        self._open = 0
        self._socket = socket.create_server((host, port))
        self._loop = asyncio.new_event_loop()
        self._stopping = asyncio.Event()
        self._thread = threading.Thread(target=self._serve, name="ledgerq-health", daemon=True)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._socket.getsockname()[1])

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread.start()
        log.info("health endpoint listening", port=self.port)

    def stop(self) -> None:
        """Stop serving, drop open connections and close the socket."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stopping.set)
            self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
        self._socket.close()

    def _serve(self) -> None:
        self._loop.run_until_complete(self._run())

    async def _run(self) -> None:
        handlers: set[asyncio.Task[None]] = set()

        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            if task is not None:
                handlers.add(task)
                task.add_done_callback(handlers.discard)
            await self._handle(reader, writer)

        server = await asyncio.start_server(accept, sock=self._socket, limit=MAX_HEAD_BYTES)
        async with server:
            await self._stopping.wait()
        for task in list(handlers):
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self._max_connections:
            writer.transport.abort()  # a flood of sockets; the probe retries
            return
        self._open += 1
        finished = False
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._timeout)
            writer.write(self._answer(head))
            writer.close()  # once the buffered response is sent
            await asyncio.wait_for(writer.wait_closed(), self._timeout)
            finished = True
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # slow, silent, oversized or gone: dropped below
        finally:
            self._open -= 1
            if not finished:  # also when cancelled by stop()
                writer.transport.abort()

    def _answer(self, head: bytes) -> bytes:
        method, _, rest = head.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            return _response(HTTPStatus.METHOD_NOT_ALLOWED, b'{"detail": "GET only"}')
        if path == b"/health/live":
            alive = self._is_alive()
            body = json.dumps({"status": "ok" if alive else "stopping"}).encode()
            status = HTTPStatus.OK if alive else HTTPStatus.SERVICE_UNAVAILABLE
            return _response(status, body, head_only=method == b"HEAD")
        if path == b"/health/ready":
            checks = self._is_ready()
            ok = all(passed for passed, _ in checks.values())
            body = json.dumps(
                {
                    "status": "ok" if ok else "fail",
                    "checks": {k: {"ok": v[0], "detail": v[1]} for k, v in checks.items()},
                }
            ).encode()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            return _response(status, body, head_only=method == b"HEAD")
        if path == b"/metrics":
            body, content_type = self._render()
            return _response(HTTPStatus.OK, body, content_type, head_only=method == b"HEAD")
        return _response(HTTPStatus.NOT_FOUND, b'{"detail": "not found"}')


def _response(
    status: HTTPStatus,
    body: bytes,
    content_type: str = "application/json",
    *,
    head_only: bool = False,
) -> bytes:
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
