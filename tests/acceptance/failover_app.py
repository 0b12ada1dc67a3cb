"""The application of the database-failover tests: each job waits a little and records its
effect in another database than the ledger's (``TEST_EFFECTS_URL``), so effects survive the
ledger's primary being killed and show exactly which bodies ran and how often."""

from __future__ import annotations

import os
import time
from typing import Any

from ledgerq import JobContext, LedgerQ, Task
from tests.acceptance.effects_app import effects_engine, record

WORK = "failover.work"


def register(app: LedgerQ) -> Task[Any, Any]:
    """Register the ``failover.work`` task with ``app``; return it."""

    @app.task(name=WORK, max_attempts=10, retry_backoff=0.05)
    def work(ctx: JobContext, key: str, seconds: float = 0.02) -> str:
        """Wait ``seconds``, then record ``key``'s effect in the effects database."""
        time.sleep(seconds)
        record(effects_engine(os.environ["TEST_EFFECTS_URL"]), ctx, key)
        return key

    return work


app = LedgerQ()
register(app)
