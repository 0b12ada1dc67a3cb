"""ItemTracker: ``ctx.items()`` and ``ctx.item_done()`` of one running attempt.

Items recorded with ``tx=`` commit with their effects (exactly once per item). Items the loop
records by itself are buffered and written in groups of ``FLUSH_EVERY`` or every
``FLUSH_SECONDS``: a crash loses at most the unwritten group, whose items run again on the
next attempt (at least once for those).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
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
        wanted = [check_item_key(k) for k in keys]
        done = self._store.begin_items(self._claim, total=len(wanted))
        try:
            for key in wanted:
                if key in done:
                    continue
                yield key
                if key not in self._recorded:
                    self._buffer.append((key, None))
                    self._recorded.add(key)
                    self._flush_if_due()
        except GeneratorExit:
            # The loop was left (an exception or break): keep what finished before.
            self._flush_quietly()
            raise
        self.flush()

    def mark_done(self, key: Any, result: Any = None, tx: object | None = None) -> None:
        """Record one item now, in ``tx``'s transaction when given (raise ``LeaseLost`` if the
        attempt lost its job: the transaction must then roll back)."""
        text = check_item_key(key)
        encoded = None if result is None else self._codec.encode(result)
        self._store.record_items(self._claim, [(text, encoded)], connection=tx)
        self._recorded.add(text)

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
