"""HealthExporter: a worker's own small HTTP endpoint (``worker start --health-port``) with
``/health/live`` and ``/metrics``, on a stdlib server in a daemon thread."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog

log = structlog.get_logger("ledgerq.exporter")


class HealthExporter:
    """Serves ``GET /health/live`` (200 while ``is_alive()``, else 503) and ``GET /metrics``
    (from ``render``). Binds ``host:port``; port 0 picks a free port (see ``port``)."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        is_alive: Callable[[], bool],
        render: Callable[[], tuple[bytes, str]],
    ) -> None:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                exporter._answer(self)

            def log_message(self, format: str, *args: object) -> None:
                return  # scrapes every few seconds would flood the worker's log

        self._is_alive = is_alive
        self._render = render
        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="ledgerq-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread.start()
        log.info("health endpoint listening", port=self.port)

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0]
        if path == "/health/live":
            alive = self._is_alive()
            body = json.dumps({"status": "ok" if alive else "stopping"}).encode()
            self._send(request, 200 if alive else 503, body, "application/json")
        elif path == "/metrics":
            body, content_type = self._render()
            self._send(request, 200, body, content_type)
        else:
            self._send(request, 404, b'{"detail": "not found"}', "application/json")

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, body: bytes, ctype: str) -> None:
        request.send_response(status)
        request.send_header("Content-Type", ctype)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)
