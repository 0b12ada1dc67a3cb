"""The application the admin tests serve and run: one task that succeeds, one that always
fails (so the dashboard has failures to retry). ``ledgerq --app tests.admin.tasks_app:app``."""

from __future__ import annotations

from typing import Any

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

    return app


app = make_app()
