"""ItemTracker: ``ctx.items()`` and ``ctx.item_done()`` of one running attempt.

Items recorded with ``tx=`` commit with their effects (exactly once per item). Items the loop
records by itself are buffered and written in groups of ``FLUSH_EVERY`` or every
``FLUSH_SECONDS``: a crash loses at most the unwritten group, whose items run again on the
next attempt (at least once for those).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Iterator
from typing import Any

import structlog

from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.items import JobItemStore, check_item_key
from ledgerq.core.job import Claim

log = structlog.get_logger("ledgerq.items")

#: Items buffered by ``ctx.items()`` before one group write.
FLUSH_EVERY = 200
#: Longest time a finished item waits in the buffer, in seconds.
FLUSH_SECONDS = 1.0


class ItemTracker:
    """Records the finished items of one attempt (fenced on its claim)."""

    def __init__(self, store: JobItemStore, claim: Claim, codec: PayloadCodec) -> None:
        self._store = store
        self._claim = claim
        self._codec = codec
        self._buffer: list[tuple[str, str | None]] = []
        self._flushed_at = time.monotonic()
        self._recorded: set[str] = set()

    def iterate(self, keys: Iterable[Any]) -> Iterator[str]:
        """Yield the keys not finished by any attempt; record each one whose loop body ended
        without an exception (unless ``item_done`` recorded it)."""
        chunks = self.iterate_chunks(keys, 1)
        try:
            for chunk in chunks:
                yield chunk[0]
        finally:
            chunks.close()

    def iterate_chunks(self, keys: Iterable[Any], size: int) -> Generator[list[str]]:
        """Like ``iterate``, but yield the unfinished keys in lists of up to ``size``; a
        chunk counts as finished when the next one is asked for."""
        if size < 1:
            raise errors.InvalidJob(f"chunk size must be at least 1, got {size}")
        wanted = [check_item_key(k) for k in keys]
        done = self._store.begin_items(self._claim, total=len(wanted))
        remaining = [key for key in dict.fromkeys(wanted) if key not in done]
        try:
            for start in range(0, len(remaining), size):
                chunk = remaining[start : start + size]
                yield chunk
                finished = [key for key in chunk if key not in self._recorded]
                self._buffer.extend((key, None) for key in finished)
                self._recorded.update(finished)
                self._flush_if_due()
        except GeneratorExit:
            # The loop was left (an exception or break): keep what finished before.
            self._flush_quietly()
            raise
        self.flush()

    def mark_done(self, items: list[tuple[Any, Any]], tx: object | None = None) -> None:
        """Record ``(key, result)`` items now, in ``tx``'s transaction when given (raise
        ``LeaseLost`` if the attempt lost its job: the transaction must then roll back)."""
        rows = [
            (check_item_key(key), None if result is None else self._codec.encode(result))
            for key, result in items
        ]
        self._store.record_items(self._claim, rows, connection=tx)
        self._recorded.update(key for key, _ in rows)

    def flush(self) -> None:
        """Write the buffered items."""
        if self._buffer:
            group, self._buffer = self._buffer, []
            self._store.record_items(self._claim, group)
        self._flushed_at = time.monotonic()

    def _flush_if_due(self) -> None:
        if len(self._buffer) >= FLUSH_EVERY or time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
            self.flush()

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except errors.LedgerqError as exc:
            log.warning(
                "could not record finished items", job_id=self._claim.job_id, error=str(exc)
            )
