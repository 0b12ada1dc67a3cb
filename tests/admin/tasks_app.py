"""The application the admin tests serve and run: one task that succeeds, one that always
fails, one that fails only its first attempt (so a retry from the dashboard succeeds), one
that takes a while (so a worker shows as busy) and one that walks batch items (failing at the
item asked for, so its progress stops part way). ``ledgerq --app tests.admin.tasks_app:app``."""

from __future__ import annotations

import time
from typing import Any

import structlog

from ledgerq import JobContext, LedgerQ


def make_app(**settings: Any) -> LedgerQ:
    """An application with the test tasks registered."""
    app = LedgerQ(**settings)

    @app.task(name="admin.add", queue="default")
    def add(ctx: JobContext, a: int, b: int, **_secrets: Any) -> int:
        return a + b

    @app.task(name="admin.boom", queue="mail", max_attempts=1)
    def boom(ctx: JobContext, reason: str = "boom") -> None:
        raise RuntimeError(reason)

    @app.task(name="admin.flaky", queue="mail", max_attempts=1)
    def flaky(ctx: JobContext) -> str:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails; a retry succeeds")
        return "ok"

    @app.task(name="admin.chatty", queue="default")
    def chatty(ctx: JobContext, dsn: str) -> None:
        structlog.get_logger("tests.chatty").info("task says hello", dsn=dsn, api_token="t0k3n")

    _register_long_running(app)
    return app


def _register_long_running(app: LedgerQ) -> None:
    """The tasks that take a while or walk items."""

    @app.task(name="admin.items", queue="default", max_attempts=1)
    def items(ctx: JobContext, total: int, fail_at: int = -1) -> int:
        for n, key in enumerate(ctx.items(range(total))):
            if n == fail_at:
                raise RuntimeError(f"item {key} failed")
        return total

    @app.task(name="admin.slow", queue="default")
    def slow(ctx: JobContext, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not ctx.stop_requested:
            time.sleep(0.05)


app = make_app()
