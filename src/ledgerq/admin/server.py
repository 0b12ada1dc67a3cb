"""Running the admin application under uvicorn, in the foreground (``ledgerq serve``) or in a
thread (tests, embedding), the rule that only loopback may be served without a long token, and
the bridge that sends uvicorn's (and every library's) log records through structlog."""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
import uvicorn
from fastapi import FastAPI

from ledgerq.admin import protocol
from ledgerq.core import errors

#: Shorter tokens refuse a public bind and warn on loopback (``token_urlsafe(32)`` gives 43).
MIN_TOKEN_CHARS = 16
#: Longest request line plus headers accepted (h11 answers 400 past it).
MAX_HEAD_BYTES = 16 * 1024


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name may resolve to anything


def check_bind(host: str, *, admin_tokens: Sequence[str], read_tokens: Sequence[str] = ()) -> None:
    """Raise ``ConfigError`` for a non-loopback bind without an admin token, or with any token
    shorter than ``MIN_TOKEN_CHARS`` (guessable from the network)."""
    if is_loopback(host):
        return
    if not admin_tokens:
        raise errors.ConfigError(
            f"refusing to serve on {host} without a token: set LEDGERQ_API_TOKEN"
            " (or bind 127.0.0.1 behind a proxy)"
        )
    if any(len(token) < MIN_TOKEN_CHARS for token in [*admin_tokens, *read_tokens]):
        raise errors.ConfigError(
            f"refusing to serve on {host} with an API token shorter than {MIN_TOKEN_CHARS}"
            " characters: use a long random one"
            " (python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may hold of the server: ``request_timeout`` seconds to send a whole
    request (head and body), ``keep_alive_seconds`` idle between requests, and
    ``max_connections`` open at once before requests get 503."""

    request_timeout: float = 10.0
    keep_alive_seconds: int = 5
    max_connections: int = 200


class AdminServer:
    """uvicorn serving ``app`` on ``host:port`` (port 0 picks a free one)."""

    def __init__(
        self,
        app: FastAPI,
        *,
        host: str,
        port: int,
        log_level: str = "warning",
        limits: ConnectionLimits | None = None,
    ) -> None:
        limits = limits or ConnectionLimits()
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level.lower(),
            access_log=False,
            server_header=False,
            lifespan="off",
            log_config=None,  # uvicorn's records go to the process's logging, not its own format
            http=protocol.with_request_timeout(limits.request_timeout),
            timeout_keep_alive=limits.keep_alive_seconds,
            limit_concurrency=limits.max_connections,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def run(self) -> None:
        """Serve in the foreground until SIGINT/SIGTERM."""
        self._server.run()

    def start(self, timeout: float = 10.0) -> int:
        """Serve in a daemon thread; return the bound port once it accepts connections."""
        self._thread = threading.Thread(target=self._server.run, name="ledgerq-admin", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise errors.ConfigError("the admin server did not start")
            time.sleep(0.01)
        return self.port

    @property
    def port(self) -> int:
        """The bound port (after start)."""
        sockets = self._server.servers[0].sockets
        return int(sockets[0].getsockname()[1])

    def stop(self, timeout: float = 10.0) -> None:
        """Stop a server started with ``start``."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)


class StructlogForwarder(logging.Handler):
    """A ``logging`` handler that hands each record to structlog: one line per record in the
    process's format (JSON with LOG_FORMAT=json), traceback included as a field, through the
    same secret masking as ledgerq's own lines. Without it uvicorn printed an unhandled
    error as a plain multi-line traceback, passwords in the error text included."""

    def emit(self, record: logging.LogRecord) -> None:
        fields: dict[str, str] = {"logger": record.name}
        if record.exc_info and record.exc_info[0] is not None:
            fields["exception"] = "".join(traceback.format_exception(*record.exc_info))
        try:
            message = record.getMessage().strip()
        except (TypeError, ValueError):  # a record whose arguments do not fit its format
            message = str(record.msg)
        structlog.get_logger(record.name).log(record.levelno, message, **fields)


def forward_stdlib_logging() -> None:
    """Route the records of ``logging`` (uvicorn's, the libraries') through structlog, for
    a process whose output is its structured log (``ledgerq serve``)."""
    root = logging.getLogger()
    root.handlers = [StructlogForwarder()]
