"""RedisTransport (the ``redis`` driver): carries job ids only, never payloads or state.

Layout: one sorted set per queue, ``{namespace}:{db}:queue:{name}``, scored by the job's
priority (lower first); members are zero-padded ids, so equal priorities pop oldest first and a
pushed-twice id is stored once. Workers pop up to their free slots with one ``BZMPOP`` over their
queues (rotated on every pull, so no queue starves another) and then claim the ids in the
database, where the ``queued -> running`` transition decides. A popped id whose claim fails is
dropped; one popped by a worker that dies before its claim stays ``queued`` in the ledger and is
found by an idle worker's claim-by-query or re-sent by the reconciler after ``REQUEUE_AFTER``.

With a ``fallback`` transport (the ``auto`` driver), a Redis error switches the worker to the
fallback (polling) at once, logged once; Redis is probed with backoff and used again when it
answers. Without one (the ``redis`` driver), errors are raised as ``TransportError``.

This module and ``redis_connect.py`` (``connect``, re-exported here, which also turns a
``redis+sentinel://`` URL into a client of the master the sentinels name) are the only ones
that import redis; the redis-free parts live beside them, the wire format in ``wire.py``, the
fallback state machine in ``outage.py`` and the producer's pipelined push in
``redis_push.py``; the lock manager in ``redis_locks.py`` and the rate limiter in
``redis_limits.py`` take their client, client type and error tuple from here.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis
import structlog

from ledgerq.core import errors
from ledgerq.core.job import JobHint
from ledgerq.transport import wire
from ledgerq.transport.outage import PROBE_FIRST_SECONDS, PROBE_MAX_SECONDS, OutageTracker
from ledgerq.transport.polling import PollingTransport
from ledgerq.transport.redis_connect import REDIS_ERRORS as REDIS_ERRORS
from ledgerq.transport.redis_connect import cluster_enabled as cluster_enabled
from ledgerq.transport.redis_connect import connect as connect

if TYPE_CHECKING:
    from ledgerq.transport.redis_push import PipelinedPush

log = structlog.get_logger("ledgerq.transport.redis")

#: The longest single blocking pop; longer waits loop, so a dead server is noticed promptly.
MAX_BLOCK_SECONDS = 1.0
#: The client type, for the transport's other Redis-backed modules (they import no redis).
RedisClient = redis.Redis


class RedisTransport:
    """Transport over Redis sorted sets; thread-safe (redis-py pools its connections).

    With ``client`` (borrowed, e.g. from the application's ``RedisPool``) ``url`` is unused
    and ``close`` leaves the client open; without, the transport connects to ``url`` itself
    and closes that client with it."""

    #: Producers push the ids of committed queued jobs.
    carries_hints = True

    def __init__(
        self,
        url: str,
        *,
        namespace: str,
        fallback: PollingTransport | None = None,
        client: redis.Redis | None = None,
    ) -> None:
        self._owns_client = client is None
        self._client: redis.Redis = client or connect(
            url,
            socket_connect_timeout=1.0,
            socket_timeout=MAX_BLOCK_SECONDS + 2.0,
            health_check_interval=30,
        )
        db = self._client.connection_pool.connection_kwargs.get("db", 0)
        self.prefix = f"{namespace}:{db}"
        self._fallback = fallback
        # Each instance has its own wake-up key, popped with the queues, so ``interrupt`` can
        # end a blocked pop at once.
        self._wake_key = f"{self.prefix}:wake:{secrets.token_hex(8)}"
        self._rotation = 0
        self._lock = threading.Lock()
        self._outage = OutageTracker(has_fallback=fallback is not None)
        self.malformed_ids = 0
        """Popped members that were not job ids (dropped, never executed)."""
        self.pushed = 0
        self._closed = threading.Event()

    @property
    def fallback_active(self) -> bool:
        """True while a worker polls the database because Redis failed."""
        return self._outage.fallback_active

    @fallback_active.setter
    def fallback_active(self, active: bool) -> None:
        # The Transport port declares a plain (settable) attribute.
        self._outage.fallback_active = active

    @property
    def fallbacks(self) -> int:
        """How often this transport fell back to polling."""
        return self._outage.fallbacks

    def _answered(self) -> None:
        """Redis answered: if that ends a fallback, the fallback rests (stops listening)."""
        if self._outage.recovered() and self._fallback is not None:
            self._fallback.rest()

    def key(self, queue: str) -> str:
        """The sorted set of ``queue``'s hints."""
        return f"{self.prefix}:queue:{queue}"

    # -- producer side ---------------------------------------------------------------------

    def push(self, hints: Sequence[JobHint]) -> None:
        """Add the hints to their queues' sets (pipelined); raise ``TransportError`` on failure.

        After a failure, pushes are skipped (raising at once) until the next probe is due:
        the jobs are in the ledger and the reconciler re-sends them."""
        if not hints:
            return
        if self._outage.skipping():
            raise errors.TransportError("Redis is unavailable; the reconciler will send these")
        try:
            pipe = self._client.pipeline(transaction=False)
            for args, _ in wire.zadd_commands(hints, self.key):
                pipe.execute_command(*args)  # type: ignore[no-untyped-call]
            pipe.execute()
        except REDIS_ERRORS as exc:
            self._outage.failed(exc)
            raise errors.TransportError(f"Redis push failed: {exc}") from exc
        self._answered()
        self.pushed += len(hints)

    def pipelined_sender(self, max_outstanding: int | None = None) -> PipelinedPush:
        """A sender of hints that writes without waiting for replies (``redis_push.py``),
        on a connection of its own (no health-check PING: it would read a push's reply),
        sharing this transport's outage state."""
        from ledgerq.transport import redis_push

        pool = self._client.connection_pool
        timeout = redis_push.PUSH_TIMEOUT_SECONDS
        options = {**pool.connection_kwargs, "health_check_interval": 0}
        options.update(socket_timeout=timeout, socket_connect_timeout=timeout)
        return redis_push.PipelinedPush(
            lambda: pool.connection_class(**options),
            self.key,
            self._outage,
            self._answered,
            REDIS_ERRORS,
            max_outstanding=max_outstanding or redis_push.MAX_OUTSTANDING,
        )

    # -- worker side -----------------------------------------------------------------------

    def carries_ids(self) -> bool:
        """True unless falling back to polling; probes Redis when a probe is due."""
        if self.fallback_active and self._outage.probe_due():
            self._probe()
        return not self.fallback_active

    def pull(self, *, queues: Sequence[str], limit: int, timeout: float) -> list[int]:
        """Pop up to ``limit`` ids from ``queues``, waiting up to ``timeout`` seconds."""
        if self.fallback_active and self._fallback is not None:
            if self._outage.probe_due():
                self._probe()
            if self.fallback_active:
                return self._fallback.pull(queues=queues, limit=limit, timeout=timeout)
        if limit <= 0:
            # A pop cannot give an id back: one taken here would never be claimed, and its
            # job would wait for the reconciler's re-send (seen as a 10 s start latency).
            return []
        keys = self._rotated([self.key(q) for q in queues])
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            block = min(deadline - time.monotonic(), MAX_BLOCK_SECONDS)
            try:
                popped = self._pop(keys, limit, block)
            except REDIS_ERRORS as exc:
                self._outage.failed(exc)
                if self._fallback is None:
                    raise errors.TransportError(f"Redis pull failed: {exc}") from exc
                return []
            self._answered()
            if popped is not None:
                return popped
            if time.monotonic() >= deadline:
                return []

    def _pop(self, keys: list[str], limit: int, block: float) -> list[int] | None:
        """One pop; None when nothing came before ``block`` ran out."""
        reply: Any
        if block > 0.001:
            # Redis takes the timeout in seconds with millisecond resolution.
            reply = self._client.bzmpop(
                round(block, 3), len(keys) + 1, [self._wake_key, *keys], min=True, count=limit
            )
        else:
            reply = self._client.zmpop(len(keys), keys, min=True, count=limit)
        if not reply:
            return None
        key, members = reply[0], reply[1]
        if wire.decode_text(key) == self._wake_key:
            return []
        ids: list[int] = []
        for member, _score in members:
            job_id = wire.parse_member(member)
            if job_id is None:
                self.malformed_ids += 1
                log.warning("dropped a malformed job id from Redis", key=wire.decode_text(key))
            else:
                ids.append(job_id)
        return ids

    def _rotated(self, keys: list[str]) -> list[str]:
        with self._lock:
            self._rotation = (self._rotation + 1) % max(len(keys), 1)
            shift = self._rotation
        return keys[shift:] + keys[:shift]

    def interrupt(self) -> None:
        """End a blocked pull at once (and the fallback's wait)."""
        if self._fallback is not None:
            self._fallback.interrupt()
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.zadd(self._wake_key, {b"wake": 0})
            pipe.expire(self._wake_key, 60)
            pipe.execute()
        except REDIS_ERRORS:
            pass  # a blocked pop on a dead server ends on its own

    # -- control lane (stop requests) ------------------------------------------------------

    @property
    def control_channel(self) -> str:
        """The pub/sub channel of stop requests in this namespace and database."""
        return f"{self.prefix}:control"

    def publish_stop(self, *, worker_id: str | None, mode: str) -> None:
        """Publish a stop wake-up (the request itself must already be in the database: a
        worker obeys only what it reads there)."""
        message = wire.encode_stop(worker_id, mode)
        try:
            self._client.publish(self.control_channel, message)
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis publish failed: {exc}") from exc

    def subscribe_stops(self, handler: Callable[[str | None, str], None]) -> None:
        """Deliver stop messages to ``handler`` from a daemon thread; resubscribes with backoff
        after a Redis failure. Malformed messages are ignored; well-formed ones are claims of
        whoever could publish, never orders."""
        self._subscribe(self.control_channel, lambda data: wire.dispatch_stop(data, handler))

    @property
    def workflow_channel(self) -> str:
        """The pub/sub channel that signals new workflow events (their feed is in the ledger)."""
        return f"{self.prefix}:workflow-events"

    def publish_workflow_events(self, workflow_ids: Sequence[str]) -> None:
        """Signal that these workflows have new feed events."""
        try:
            self._client.publish(self.workflow_channel, wire.encode_workflow_ids(workflow_ids))
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis publish failed: {exc}") from exc

    def subscribe_workflow_events(self, handler: Callable[[list[str]], None]) -> None:
        """Call ``handler(workflow_ids)`` for every signal from a daemon thread (resubscribing
        with backoff after a failure) until ``close``. Malformed messages are ignored."""
        self._subscribe(
            self.workflow_channel, lambda data: wire.dispatch_workflow_ids(data, handler)
        )

    def _subscribe(self, channel: str, on_data: Callable[[Any], None]) -> None:
        thread = threading.Thread(
            target=self._listen, args=(channel, on_data), name="ledgerq-pubsub", daemon=True
        )
        thread.start()

    def _listen(self, channel: str, on_data: Callable[[Any], None]) -> None:
        backoff = PROBE_FIRST_SECONDS
        while not self._closed.is_set():
            try:
                pubsub = self._client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                pubsub.subscribe(channel)
                backoff = PROBE_FIRST_SECONDS
                while not self._closed.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None:
                        on_data(message.get("data"))
                pubsub.close()
            except REDIS_ERRORS:
                self._closed.wait(backoff)
                backoff = min(backoff * 2, PROBE_MAX_SECONDS)

    # -- health ----------------------------------------------------------------------------

    def ping(self) -> float:
        """Round-trip time to Redis in seconds; raise ``TransportError`` if it does not answer."""
        started = time.perf_counter()
        try:
            self._client.ping()
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis does not answer: {exc}") from exc
        return time.perf_counter() - started

    def round_trip_seconds(self) -> float | None:
        """``ping()`` for health checks, None while Redis does not answer."""
        try:
            return self.ping()
        except errors.TransportError:
            return None

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy``, or None if the server does not tell (ACL)."""
        try:
            reply: Any = self._client.config_get("maxmemory-policy")
        except redis.ResponseError:
            return None
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis does not answer: {exc}") from exc
        value = reply.get("maxmemory-policy") or reply.get(b"maxmemory-policy")
        return wire.decode_text(value) if value is not None else None

    def cluster_enabled(self) -> bool:
        """Whether the server is a Redis Cluster node (refused: ``redis_url.CLUSTER_REFUSAL``);
        raise ``TransportError`` if it does not answer."""
        return cluster_enabled(self._client)

    def queue_lengths(self, queues: Sequence[str]) -> dict[str, int]:
        """Hints waiting in Redis per queue (they may include stale ids)."""
        try:
            pipe = self._client.pipeline(transaction=False)
            for queue in queues:
                pipe.zcard(self.key(queue))
            counts = pipe.execute()
        except REDIS_ERRORS as exc:
            raise errors.TransportError(f"Redis does not answer: {exc}") from exc
        return {q: int(n) for q, n in zip(queues, counts, strict=True)}

    def close(self) -> None:
        """End the pub/sub lanes, drop the wake-up key and close the fallback; close the
        client too unless it is borrowed. Calling it again does nothing."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._fallback is not None:
            self._fallback.close()
        with contextlib.suppress(*REDIS_ERRORS):
            self._client.delete(self._wake_key)
        if self._owns_client:
            self._client.close()

    def _probe(self) -> None:
        try:
            self._client.ping()
        except REDIS_ERRORS as exc:
            self._outage.failed(exc)
            return
        self._answered()
