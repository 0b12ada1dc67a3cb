"""Request bodies are capped by the bytes received, not by what ``Content-Length`` claims, and
a request without a valid token is refused before its body is read (issue 22, item 1)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from tests.admin.conftest import ADMIN_TOKEN
from tests.admin.tasks_app import make_app
from tests.security.conftest import StartServe, read_response

MIB = 1024 * 1024


def _chunked_head(path: str, token: str | None, content_type: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Type: {content_type}"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token}")
    lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _send_body(sock: object, prefix: bytes, total: int, sent: list[int]) -> None:
    """Send ``prefix`` then filler up to ``total`` bytes as chunks, then the closing quote and
    the last chunk; stop quietly when the server closes the connection."""
    piece = b"x" * (64 * 1024)
    try:
        sock.sendall(_chunk(prefix))  # type: ignore[attr-defined]
        sent[0] += len(prefix)
        while sent[0] < total:
            sock.sendall(_chunk(piece))  # type: ignore[attr-defined]
            sent[0] += len(piece)
        sock.sendall(_chunk(b'"]}') + b"0\r\n\r\n")  # type: ignore[attr-defined]
    except OSError:
        pass


def _upload(
    start: Callable[[], object], path: str, token: str | None, total: int, ctype: str
) -> tuple[int, float, int]:
    """Stream a ``total``-byte chunked body to ``path``; the status, the seconds until it
    came, and the bytes sent by then."""
    sock = start()
    sent = [0]
    try:
        sock.sendall(_chunked_head(path, token, ctype))  # type: ignore[attr-defined]
        prefix = b'{"task": "admin.add", "args": ["' if ctype.endswith("json") else b"token=x"
        sender = threading.Thread(target=_send_body, args=(sock, prefix, total, sent))
        began = time.monotonic()
        sender.start()
        status, _head = read_response(sock, timeout=30)  # type: ignore[arg-type]
        elapsed = time.monotonic() - began
        sent_then = sent[0]
        sender.join(60)
    finally:
        sock.close()  # type: ignore[attr-defined]
    return status, elapsed, sent_then


def test_chunked_upload_without_token_is_refused_before_it_is_read(
    start_serve: StartServe, make_database_url: Callable[[str], str]
) -> None:
    served = start_serve(make_database_url("sqlite"))
    peak_before = served.memory_kib()
    status, elapsed, _sent = _upload(
        served.connect, "/api/v1/jobs", None, 50 * MIB, "application/json"
    )
    assert status == 401 and elapsed < 5
    wrong, _, _ = _upload(served.connect, "/api/v1/jobs", "wrong-token", 8 * MIB, "text/json")
    assert wrong == 403
    growth_mib = (served.memory_kib() - peak_before) / 1024
    # Before the fix the 50 MB body was read and parsed whole first: +190 MB.
    assert growth_mib < 8, f"server peak memory grew by {growth_mib:.1f} MiB"


def test_oversize_chunked_bodies_get_413_and_nothing_is_stored(
    start_serve: StartServe, make_database_url: Callable[[str], str]
) -> None:
    url = make_database_url("sqlite")
    served = start_serve(url)
    peak_before = served.memory_kib()
    # The cap is 2 x MAX_PAYLOAD_BYTES (256 KiB) + 4 KiB; a valid token may not send 20 MB.
    status, _, _ = _upload(
        served.connect, "/api/v1/jobs", ADMIN_TOKEN, 20 * MIB, "application/json"
    )
    assert status == 413
    login, _, _ = _upload(
        served.connect, "/dashboard/login", None, 20 * MIB, "application/x-www-form-urlencoded"
    )
    assert login == 413
    growth_mib = (served.memory_kib() - peak_before) / 1024
    assert growth_mib < 8, f"server peak memory grew by {growth_mib:.1f} MiB"
    app = make_app(database_url=url)
    try:
        assert app.client.list() == []
    finally:
        app.close()
