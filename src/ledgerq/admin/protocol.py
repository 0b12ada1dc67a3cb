"""The HTTP/1.1 protocol of ``ledgerq serve``: uvicorn's h11 protocol plus a deadline on
receiving each request. uvicorn (0.55) times out only idle keep-alive connections, and only
after a first response: a client that connects and sends nothing, or half a request line, or
a body a byte a second (slowloris), would hold its connection for ever."""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

#: States in which the client still owes us (part of) a request.
_RECEIVING = (h11.IDLE, h11.SEND_BODY)


class DeadlineH11Protocol(H11Protocol):
    """Closes a connection whose client has not sent a whole request (head and body) within
    ``request_timeout`` seconds of connecting, or of the first byte of its next request.
    Idle time between requests stays with uvicorn's ``timeout_keep_alive``."""

    request_timeout: float = 10.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state in _RECEIVING:
            self._arm()
        else:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Between requests the keep-alive timer rules; a client still sending the body of a
        # request that was answered early (a 401, a 413) keeps its deadline.
        if self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._deadline is None:
            self._deadline = self.loop.call_later(self.request_timeout, self._on_deadline)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _on_deadline(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.logger.info("closing a connection that sent no whole request in time")
            self.transport.close()


def with_request_timeout(seconds: float) -> type[asyncio.Protocol]:
    """The protocol class for uvicorn's ``http`` option, with its request deadline."""

    class Protocol(DeadlineH11Protocol):
        request_timeout = seconds

    return Protocol
