"""The Redis URLs ledgerq accepts, parsed without a Redis library: one server (``redis://``,
``rediss://``, ``unix://``) or a master that Redis Sentinel watches and fails over
(``redis+sentinel://``). Redis Cluster (``redis+cluster://``) is refused with its reason.

The Sentinel form::

    redis+sentinel://[[user]:password@]host1[:port][,host2[:port]...]/service[/db]
        [?sentinel_password=...&sentinel_username=...]

The user and password are the master's (and its replicas'), the query's are the sentinels'
own (``requirepass`` in sentinel.conf); a port left out is 26379, a db left out 0. Every
error names the problem with the URL's passwords masked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from ledgerq.core.redaction import MASK, mask_url

#: One Redis server.
SINGLE_SCHEMES = ("redis", "rediss", "unix")
#: A master found through Redis Sentinel.
SENTINEL_SCHEME = "redis+sentinel"
#: Redis Cluster, refused (``CLUSTER_REFUSAL`` says why).
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
#: The port of a sentinel given without one.
SENTINEL_DEFAULT_PORT = 26379
#: The query parameters of a Sentinel URL.
SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username")

#: Why a Redis Cluster is refused, wherever one is detected (scheme or server).
CLUSTER_REFUSAL = (
    "Redis Cluster is not supported: a worker pops from all its queues with one multi-key"
    " BZMPOP, and a cluster runs a multi-key command only when every key hashes to the same"
    " slot (keys would need one hash tag per worker's queue set). Use one Redis server, or"
    " Redis Sentinel for failover (redis+sentinel://host:26379,.../mymaster)"
)

_SERVICE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True, slots=True)
class SentinelTarget:
    """Where a Sentinel URL points: the sentinels to ask, the master's service name and db,
    and the credentials of the master and of the sentinels."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


def scheme_of(url: str) -> str:
    """The URL's scheme in lower case (empty when it has none)."""
    head, sep, _ = url.partition("://")
    return head.lower() if sep else ""


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` is of the ``redis+sentinel://`` form."""
    return scheme_of(url) == SENTINEL_SCHEME


def check_redis_url(url: str) -> str:
    """Return ``url`` if the transport can use it; else raise ``ValueError`` naming the
    problem (passwords masked). A Redis Cluster URL is refused with ``CLUSTER_REFUSAL``."""
    scheme = scheme_of(url)
    if scheme in CLUSTER_SCHEMES:
        raise ValueError(CLUSTER_REFUSAL)
    if scheme == SENTINEL_SCHEME:
        parse_sentinel_url(url)
        return url
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError: not a number, or out of range
    except ValueError as exc:
        raise ValueError(f"redis_url {mask_url(url)!r} is malformed: {exc}") from None
    if parts.scheme not in SINGLE_SCHEMES:
        raise ValueError(
            "redis_url must start with redis://, rediss://, unix:// or redis+sentinel://,"
            f" got {mask_url(url)!r}"
        )
    if parts.scheme != "unix" and not parts.hostname and port is None:
        raise ValueError(f"redis_url {mask_url(url)!r} names no host")
    return url


def parse_sentinel_url(url: str) -> SentinelTarget:
    """The sentinels, service name, db and credentials of a ``redis+sentinel://`` URL; raise
    ``ValueError`` naming what is wrong."""
    shown = _shown(url)
    if not is_sentinel_url(url):
        raise ValueError(f"redis_url {shown!r} is not a redis+sentinel:// URL")
    rest = url.partition("://")[2]
    rest, _, query = rest.partition("?")
    if "#" in query or "#" in rest:
        raise ValueError(f"redis_url {shown!r} has a fragment (#); encode it as %23")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username, password = _credentials(userinfo) if at else (None, None)
    service_name, db = _service_and_db(path, shown)
    options = _options(query, shown)
    return SentinelTarget(
        sentinels=tuple(_address(item, shown) for item in hosts.split(",")),
        service_name=service_name,
        db=db,
        username=username,
        password=password,
        sentinel_username=options.get("sentinel_username"),
        sentinel_password=options.get("sentinel_password"),
    )


def _shown(url: str) -> str:
    """``url`` for an error message: passwords masked, and every query value too (a
    misspelt ``sentinel_pasword=`` is still a password)."""
    base, question, query = mask_url(url).partition("?")
    if not question:
        return base
    masked = "&".join(
        f"{name}={MASK}" if sep else name
        for name, sep, _ in (item.partition("=") for item in query.split("&"))
    )
    return f"{base}?{masked}"


def _credentials(userinfo: str) -> tuple[str | None, str | None]:
    user, colon, password = userinfo.partition(":")
    return (unquote(user) or None), (unquote(password) if colon else None)


def _address(item: str, shown: str) -> tuple[str, int]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::(\d+))?|([^\[\]:/\s]+)(?::(\d+))?", item)
    if match is None:
        problem = "an empty sentinel address" if not item else f"a bad sentinel address {item!r}"
        raise ValueError(f"redis_url {shown!r} has {problem}; give host[:port],host[:port],...")
    host = match.group(1) or match.group(3)
    port_text = match.group(2) or match.group(4)
    port = int(port_text) if port_text else SENTINEL_DEFAULT_PORT
    if not 0 < port < 65536:
        raise ValueError(f"redis_url {shown!r} has a sentinel port out of range: {port}")
    return host, port


def _service_and_db(path: str, shown: str) -> tuple[str, int]:
    """``service`` or ``service/db`` (a trailing slash is allowed)."""
    segments = path.rstrip("/").split("/") if path.rstrip("/") else []
    if not segments or not segments[0]:
        raise ValueError(
            f"redis_url {shown!r} names no Sentinel service: add /<master name> (e.g. /mymaster)"
        )
    if len(segments) > 2:
        raise ValueError(f"redis_url {shown!r}: the path must be /<master name>[/<db>]")
    name = unquote(segments[0])
    if not _SERVICE_NAME.fullmatch(name):
        raise ValueError(f"redis_url {shown!r}: {name!r} is not a Sentinel master name")
    if len(segments) == 1:
        return name, 0
    if not segments[1].isdigit() or int(segments[1]) > 1_000_000:
        raise ValueError(f"redis_url {shown!r}: the db must be a number, got {segments[1]!r}")
    return name, int(segments[1])


def _options(query: str, shown: str) -> dict[str, str]:
    """The query's known options; an unknown or repeated one is an error."""
    try:
        values = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"redis_url {shown!r} has a malformed query") from None
    unknown = sorted(set(values) - set(SENTINEL_OPTIONS))
    if unknown:
        raise ValueError(
            f"redis_url {shown!r} has unknown option(s) {', '.join(unknown)};"
            f" known: {', '.join(SENTINEL_OPTIONS)}"
        )
    repeated = sorted(name for name, given in values.items() if len(given) > 1)
    if repeated:
        raise ValueError(f"redis_url {shown!r} repeats {', '.join(repeated)}")
    return {name: given[0] for name, given in values.items() if given[0]}
