"""Slow and idle clients cannot hold a server: the API closes a connection whose request does
not arrive in time and answers 503 past its connection cap; a worker's health port serves
idle sockets without a thread each and closes them (issue 22, item 2)."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from ledgerq.metrics.exporter import HealthExporter
from tests.security.conftest import StartServe, closed_within, read_response


def test_api_closes_a_slowloris_and_an_idle_connection(
    start_serve: StartServe, make_database_url: Callable[[str], str]
) -> None:
    served = start_serve(make_database_url("sqlite"), LEDGERQ_API_REQUEST_TIMEOUT="2")
    slow, idle, dribble = served.connect(), served.connect(), served.connect()
    try:
        slow.sendall(b"GET /health/live HT")  # half a request line, then nothing
        dribble.sendall(b"POST /dashboard/login HTTP/1.1\r\nHost: x\r\nContent-Length: 99\r\n\r\n")
        threading.Thread(target=_dribble, args=(dribble,), daemon=True).start()
        for sock in (slow, idle, dribble):
            waited = closed_within(sock, timeout=15)
            assert waited is not None and waited < 6, "a slow client kept its connection"
        # A complete request on a fresh connection is still served.
        fresh = served.connect()
        fresh.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(fresh)[0] == 200
        fresh.close()
    finally:
        slow.close()
        idle.close()
        dribble.close()


def _dribble(sock: socket.socket) -> None:
    """A body a byte every half second (each byte would reset a plain idle timer)."""
    try:
        for _ in range(99):
            sock.sendall(b"t")
            time.sleep(0.5)
    except OSError:
        pass


def test_api_answers_503_past_its_connection_cap(
    start_serve: StartServe, make_database_url: Callable[[str], str]
) -> None:
    served = start_serve(
        make_database_url("sqlite"),
        LEDGERQ_API_REQUEST_TIMEOUT="3",
        LEDGERQ_API_MAX_CONNECTIONS="4",
    )
    holders = [served.connect() for _ in range(4)]
    try:
        time.sleep(0.3)
        extra = served.connect()
        extra.sendall(b"GET /health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(extra)[0] == 503
        extra.close()
    finally:
        for sock in holders:
            sock.close()


@pytest.fixture
def exporter() -> Iterator[HealthExporter]:
    """A health exporter on a free port whose idle sockets time out after a second."""
    served = HealthExporter(
        host="127.0.0.1",
        port=0,
        is_alive=lambda: True,
        render=lambda: (b"up 1\n", "text/plain"),
        timeout_seconds=1.0,
    )
    served.start()
    yield served
    served.stop()


def _get(port: int, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_idle_sockets_take_no_thread_each_and_the_port_still_answers(
    exporter: HealthExporter,
) -> None:
    threads_before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", exporter.port), timeout=5) for _ in range(50)]
    try:
        time.sleep(0.3)
        # Before: one thread per connection (21 -> 71 threads).
        assert threading.active_count() - threads_before < 5
        began = time.monotonic()
        assert _get(exporter.port, "/health/live") == 200
        assert _get(exporter.port, "/metrics") == 200
        assert time.monotonic() - began < 2
        for sock in idle[:5]:
            waited = closed_within(sock, timeout=5)
            assert waited is not None and waited < 3, "an idle socket was kept open"
    finally:
        for sock in idle:
            sock.close()
    assert _get(exporter.port, "/nowhere") == 404
