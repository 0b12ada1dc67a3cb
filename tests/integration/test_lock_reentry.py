"""A lock is not re-entrant: taking it again in the thread that holds it says so at once
(instead of waiting for itself until its timeout, or for ever); other threads still wait."""

from __future__ import annotations

import threading

import pytest

from ledgerq import LedgerQ
from ledgerq.core import errors


def test_nested_lock_in_one_thread_is_refused_clearly(app: LedgerQ) -> None:
    with app.lock("report", ttl=10) as outer:
        with (
            pytest.raises(errors.InvalidLock, match="not re-entrant"),
            app.lock("report", ttl=10, timeout=None),
        ):
            pass
        assert outer.renew().token == outer.token  # still held after the refusal
        other: list[object] = []
        waiter = threading.Thread(
            target=lambda: other.append(app.locks.acquire("report", ttl=10, timeout=0.2))
        )
        waiter.start()
        waiter.join(timeout=30)
        assert other == [None]  # another thread waits its timeout, as before
    with app.lock("report", ttl=10) as again:  # released: the thread may take it again
        assert again.token > outer.token
