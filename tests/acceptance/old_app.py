"""An older release of ``effects_app`` for rolling-deploy tests: it registers only
``effects.noop``, so its workers meet every other effect task as an unknown task."""

from __future__ import annotations

import time

from ledgerq import JobContext, LedgerQ
from tests.acceptance.effects_app import NOOP

app = LedgerQ()


@app.task(name=NOOP, max_attempts=1)
def noop(ctx: JobContext, n: int, seconds: float = 0.0) -> None:
    """Do nothing (the one task both releases know)."""
    time.sleep(seconds)
