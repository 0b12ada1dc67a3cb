"""Producers of the HTTP API: who enqueued a job, recorded inside the job's own argument
envelope (``{"producer": name, "args": [...], "kwargs": {...}}``), and the port that stores a
bulk request's jobs and its ``Idempotency-Key`` records in one transaction.

The producer's name rides in the ``args`` column the job already has, so it is written in the
same row and statement as the job, costs no table or index, and goes when the job goes. The
runtime reads only ``args`` and ``kwargs`` of the envelope (``PayloadCodec.decode_args``), so a
handler never sees it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from ledgerq.core import errors
from ledgerq.core.operations import IdempotentRequest

#: The envelope key naming the producer that enqueued a job over HTTP.
PRODUCER_KEY = "producer"
_PREFIX = '{"' + PRODUCER_KEY + '":'


def with_producer(args_json: str, producer: str) -> str:
    """``args_json`` (an encoded ``{"args": ..., "kwargs": ...}`` envelope) with the producer's
    name added; text surgery, not a re-encode, so a bulk request pays no second JSON pass."""
    if not args_json.startswith("{"):
        raise errors.PayloadError("job arguments must be encoded as an object")
    rest = args_json[1:]
    return f"{_PREFIX}{json.dumps(producer)}{',' if rest != '}' else ''}{rest}"


def producer_of(args_json: str) -> str | None:
    """The producer recorded in a job's argument envelope, or None (not enqueued by one)."""
    if not args_json.startswith(_PREFIX):
        return None  # the envelope starts with the key when a producer wrote it
    try:
        found = json.loads(args_json).get(PRODUCER_KEY)
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


class KeyTaken(errors.StoreError):
    """An ``Idempotency-Key`` record already exists: the transaction that tried to take it
    was rolled back, so nothing of the request was stored."""


class RequestLedger(Protocol):
    """Idempotency-Key records written in the same transaction as the jobs they answer."""

    def transaction(self) -> AbstractContextManager[object]:
        """A transaction on the ledger; pass it as ``tx=`` to ``Client.enqueue`` and as
        ``connection`` below. Commits when the block ends, rolls back if it raises."""
        ...

    def remember_requests(
        self, records: Sequence[IdempotentRequest], *, connection: object
    ) -> None:
        """Insert ``records`` inside ``connection``'s transaction; raise ``KeyTaken`` if any
        key exists (waiting for a concurrent transaction holding it to end first)."""

    def find_requests(self, keys: Sequence[str]) -> list[IdempotentRequest | None]:
        """The record of each key (None where there is none), in the order of ``keys``."""
        ...
