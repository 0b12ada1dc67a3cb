"""The application the scheduler tests run in real ``ledgerq scheduler`` processes: one task
and one every-second schedule under the run-once missed policy. The database comes from
``LEDGERQ_DATABASE_URL``."""

from __future__ import annotations

from typing import Any

from ledgerq import LedgerQ

EVERY_SECOND = "every-second"
TICK_TASK = "sched.tick"

app = LedgerQ()


@app.periodic(cron="* * * * * *", name=EVERY_SECOND, missed="once", args=("beat",))
@app.task(name=TICK_TASK)
def tick(ctx: Any, label: str) -> str:
    """Does nothing: the tests count the jobs the scheduler creates."""
    return label
