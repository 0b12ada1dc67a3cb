"""Tokens, roles, dashboard sessions and CSRF for the admin surface.

Tokens are kept only as SHA-256 digests and compared with ``hmac.compare_digest`` against every
configured digest, so neither the plain token nor timing reveals it. Three roles: ``read``
(look), ``admin`` (also change) and ``producer`` (enqueue, and read only the jobs it enqueued:
see docs/producers-http.md); a producer token never opens a dashboard session. A browser
signs in once and gets a signed, HttpOnly, SameSite=Strict session cookie; every
state-changing request authenticated by that cookie must also carry the page's CSRF token in
``X-CSRF-Token``. Bearer requests need none (browsers never add them).

Sessions are signed with a key that is random per process, so the ``ledgerq serve`` process
that issued a session is the only one that accepts it; signing out therefore revokes it for
good by remembering it in that process until it would have expired. A restart signs every
browser out (bearer tokens are unaffected).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

SESSION_COOKIE = "ledgerq_session"
CSRF_HEADER = "X-CSRF-Token"
SESSION_SECONDS = 12 * 3600


class Role(StrEnum):
    """What a caller may do; ``admin`` includes everything ``read`` may. ``producer`` may
    enqueue (jobs, batches, workflows) and read the jobs it enqueued, nothing else."""

    READ = "read"
    ADMIN = "admin"
    PRODUCER = "producer"


#: The name a producer token without one of its own (``name:token``) enqueues under.
DEFAULT_PRODUCER = "producer"
#: A producer's name: what its jobs record (``docs/producers-http.md``).
PRODUCER_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def producer_tokens(entries: list[str]) -> list[tuple[str, str]]:
    """``(name, token)`` per entry of LEDGERQ_API_PRODUCER_TOKEN: ``name:token`` names the
    producer, a bare token enqueues as ``producer``. Raise ValueError for a bad name or an
    empty token (never echoing the token)."""
    pairs = []
    for entry in entries:
        name, sep, token = entry.partition(":")
        if not sep:
            name, token = DEFAULT_PRODUCER, entry
        if not PRODUCER_NAME_PATTERN.fullmatch(name):
            raise ValueError(
                "a producer token is `token` or `name:token` with a name of letters, digits,"
                " '_', '.' or '-' (at most 64)"
            )
        if not token:
            raise ValueError(f"producer {name!r} has an empty token")
        pairs.append((name, token))
    return pairs


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: its role and how it proved it (``bearer`` or ``session``);
    ``producer`` names a producer token's producer (empty for the other roles)."""

    role: Role
    via: str
    session: str = ""
    producer: str = ""

    @property
    def label(self) -> str:
        """What the audit log records about the caller (never the token)."""
        if self.producer:
            return f"{self.role.value}:{self.producer}/{self.via}"
        return f"{self.role.value}/{self.via}"


class TokenAuth:
    """Checks bearer tokens and session cookies against the configured tokens' digests."""

    def __init__(
        self,
        *,
        admin_tokens: list[str],
        read_tokens: list[str],
        producers: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Plain tokens are hashed here and not kept; ``producers`` holds ``(name, token)``
        pairs (``producer_tokens``). Raises ValueError if no admin token is given."""
        if not admin_tokens:
            raise ValueError("at least one admin token is needed")
        self._digests = [(_digest(t), Role.ADMIN, "") for t in admin_tokens]
        self._digests += [(_digest(t), Role.READ, "") for t in read_tokens]
        self._digests += [(_digest(t), Role.PRODUCER, name) for name, t in producers]
        # Sessions and CSRF tokens are signed with a key of this process (see the module
        # docstring); rotating a token changes it as well.
        seed = (
            b"ledgerq-session" + b"".join(d for d, _, _ in self._digests) + secrets.token_bytes(32)
        )
        self._key_bytes = hashlib.sha256(seed).digest()
        self._revoked: dict[str, float] = {}  # session signature -> its expiry (epoch s)
        self._revoked_lock = threading.Lock()

    def role_of(self, token: str) -> Role | None:
        """The role of ``token``, or None; constant time in the token's content."""
        found = self._holder_of(token)
        return found[0] if found else None

    def _holder_of(self, token: str) -> tuple[Role, str] | None:
        """The role of ``token`` and its producer's name (empty but for producers)."""
        presented = _digest(token)
        found: tuple[Role, str] | None = None
        for digest, role, name in self._digests:
            if hmac.compare_digest(presented, digest) and found is None:
                found = (role, name)
        return found

    def _sign(self, text: str) -> str:
        return hmac.new(self._key_bytes, text.encode(), hashlib.sha256).hexdigest()

    def new_session(self, role: Role) -> str:
        """A signed session cookie value for ``role``, valid for SESSION_SECONDS."""
        body = f"{role.value}.{int(time.time()) + SESSION_SECONDS}.{secrets.token_hex(8)}"
        return f"{body}.{self._sign(body)}"

    def session_role(self, value: str) -> Role | None:
        """The role of a session cookie value, or None if forged or expired."""
        body, _, signature = value.rpartition(".")
        if not self._signed(body, signature):
            return None
        role, expires, _nonce = [*body.split("."), "", "", ""][:3]
        if not expires.isdigit() or int(expires) < time.time():
            return None
        with self._revoked_lock:
            if signature in self._revoked:
                return None
        return Role(role) if role in Role.__members__.values() else None

    def revoke(self, value: str) -> None:
        """Refuse the session cookie ``value`` from now on (sign-out); forgets revocations of
        sessions that have expired anyway, so the set stays as small as the live sessions."""
        body, _, signature = value.rpartition(".")
        expires = [*body.split("."), "", ""][1]
        now = time.time()
        with self._revoked_lock:
            for known, until in list(self._revoked.items()):
                if until < now:
                    del self._revoked[known]
            if self._signed(body, signature) and expires.isdigit():
                self._revoked[signature] = float(expires)

    def _signed(self, body: str, signature: str) -> bool:
        return bool(body) and hmac.compare_digest(self._sign(body), signature)

    def csrf_token(self, session: str) -> str:
        """The CSRF token bound to one session."""
        return self._sign(f"csrf:{session}")

    def authenticate(self, request: Request) -> Caller:
        """The caller of ``request``: raise 401 without credentials, 403 with wrong ones."""
        header = request.headers.get("authorization", "")
        if header:
            scheme, _, token = header.partition(" ")
            found = self._holder_of(token.strip()) if scheme.lower() == "bearer" else None
            if found is None:
                raise HTTPException(403, "invalid token")
            return Caller(found[0], "bearer", producer=found[1])
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie:
            role = self.session_role(cookie)
            if role is None:
                raise HTTPException(401, "session expired; sign in again", _challenge())
            return Caller(role, "session", cookie)
        raise HTTPException(401, "authentication required", _challenge())

    def check_csrf(self, request: Request, caller: Caller) -> None:
        """Refuse (403) a cookie-authenticated change without the session's CSRF token."""
        if caller.via != "session":
            return
        presented = request.headers.get(CSRF_HEADER, "")
        if not hmac.compare_digest(presented, self.csrf_token(caller.session)):
            raise HTTPException(403, "missing or wrong CSRF token")


def _challenge() -> dict[str, str]:
    return {"WWW-Authenticate": 'Bearer realm="ledgerq"'}


PRODUCER_ONLY = "a producer token may only enqueue and read the jobs it enqueued"


def require(request: Request, role: Role) -> Caller:
    """The authenticated caller of ``request`` if it holds ``role`` (403 otherwise): ``read``
    admits the read and admin roles, ``producer`` the producer and admin roles, ``admin``
    only admin. A state-changing request must also pass the CSRF check."""
    auth: TokenAuth = request.app.state.auth
    caller = auth.authenticate(request)
    if role is Role.ADMIN and caller.role is not Role.ADMIN:
        raise HTTPException(403, "this action needs the admin token")
    if role is Role.READ and caller.role is Role.PRODUCER:
        raise HTTPException(403, PRODUCER_ONLY)
    if role is Role.PRODUCER and caller.role is Role.READ:
        raise HTTPException(403, "this action needs the admin token or a producer token")
    if request.method not in ("GET", "HEAD", "OPTIONS"):
        auth.check_csrf(request, caller)
    return caller


# Declares the bearer scheme in the OpenAPI document; the checks themselves are in ``require``.
_bearer = HTTPBearer(
    auto_error=False,
    description="LEDGERQ_API_TOKEN, LEDGERQ_API_READ_TOKEN or LEDGERQ_API_PRODUCER_TOKEN",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def read_access(request: Request, _declared: Credentials) -> Caller:
    """Dependency: a read or admin token or session (a producer token gets 403)."""
    return require(request, Role.READ)


def enqueue_access(request: Request, _declared: Credentials) -> Caller:
    """Dependency: the admin token or a producer token (a read token gets 403)."""
    return require(request, Role.PRODUCER)


def job_access(request: Request, _declared: Credentials) -> Caller:
    """Dependency: any valid token or session; the route shows a producer only its own jobs."""
    auth: TokenAuth = request.app.state.auth
    return auth.authenticate(request)


def admin_access(request: Request, _declared: Credentials) -> Caller:
    """Dependency: the admin token or an admin session (and CSRF for changes)."""
    return require(request, Role.ADMIN)
