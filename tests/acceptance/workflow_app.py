"""The application the workflow acceptance tests run in real worker processes: one step task
that records its start and its effect in ``effects_app``'s tables (same database), so a test
sees what ran, how often, and which results reached each step.

Run it with ``ledgerq --app tests.acceptance.workflow_app:app worker start``.
"""

from __future__ import annotations

from typing import Any

from ledgerq import JobContext, LedgerQ
from tests.acceptance.effects_app import effects_engine, record, work

STEP = "flow.step"


def make_app(**overrides: Any) -> LedgerQ:
    """A LedgerQ with the step task; ``overrides`` are settings (e.g. ``database_url``)."""
    application = LedgerQ(**overrides)
    url = application.settings.database_url.get_secret_value()

    @application.task(name=STEP, max_attempts=5, retry_backoff=0.05)
    def step(
        ctx: JobContext, key: str, seconds: float, upstream: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Record the start, work ``seconds``, record ``key``'s effect; return the key and
        the keys of the upstream results it received."""
        engine = effects_engine(url)
        work(engine, ctx, key, seconds, None)
        record(engine, ctx, key)
        received = sorted(str(r["key"]) for r in (upstream or {}).values())
        return {"key": key, "received": received}

    return application


app = make_app()
