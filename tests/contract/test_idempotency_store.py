"""The IdempotencyStore contract on every database: the first record of a key holds it."""

from __future__ import annotations

import sqlalchemy as sa

from ledgerq.core.operations import IdempotentRequest
from ledgerq.store.queues import SqlQueueControls


def test_the_first_request_of_a_key_keeps_it(engine: sa.Engine) -> None:
    store = SqlQueueControls(engine)
    assert store.find_request("k1") is None
    first = IdempotentRequest("k1", 7, "hash-a")
    assert store.remember_request(first) == first
    assert store.remember_request(IdempotentRequest("k1", 8, "hash-b")) == first
    assert store.find_request("k1") == first
    other = IdempotentRequest("k2", 8, "hash-b")
    assert store.remember_request(other) == other and store.find_request("k2") == other
