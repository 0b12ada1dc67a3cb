"""Gatekeeper: the ASGI middleware every request passes before any route sees it. It refuses
a request without valid credentials (401/403) before a byte of its body is read, so an
anonymous client cannot make the server buffer or parse anything, and it adds the security
headers to every response. Body size is capped by FastAPI's ``max_body_size`` (bytes actually
received, chunked or not), which sits outside this middleware."""

from __future__ import annotations

from fastapi import HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledgerq.admin.auth import TokenAuth

#: Paths served without credentials: probes, and the dashboard's pages, which send a browser
#: without a session to the sign-in form (whose POST carries the token in its body).
PUBLIC_PATHS = frozenset({"/", "/health", "/health/live", "/health/ready", "/dashboard"})
PUBLIC_PREFIXES = ("/dashboard/",)

SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    # Everything is served by this process; no CDN, no inline script.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " frame-ancestors 'none'; form-action 'self'"
    ),
}


def is_public(path: str) -> bool:
    """Whether ``path`` is answered without credentials (its route may still check them)."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class Gatekeeper:
    """Authenticate first, then pass the request on; roles and CSRF stay with the routes'
    dependencies, which know what each route needs."""

    def __init__(self, app: ASGIApp, auth: TokenAuth) -> None:
        self._app = app
        self._auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        if not is_public(scope["path"]):
            try:
                # Headers and cookies only: the body stays unread in the socket.
                self._auth.authenticate(Request(scope))
            except HTTPException as exc:
                refusal = JSONResponse(
                    {"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers
                )
                await refusal(scope, receive, send_with_headers)
                return
        await self._app(scope, receive, send_with_headers)
