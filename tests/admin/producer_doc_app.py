"""The application docs/producers-http.md enqueues into: tests/admin/test_producers_doc.py
runs its curl examples against ``ledgerq --app tests.admin.producer_doc_app:app serve``."""

from __future__ import annotations

from typing import Any

from ledgerq import JobContext, LedgerQ


def make_app(**settings: Any) -> LedgerQ:
    """An application with the tasks the document's examples name."""
    app = LedgerQ(**settings)

    @app.task(name="emails.send", queue="mail")
    def send_email(ctx: JobContext, to: str, template: str) -> None:
        """Send one e-mail (the examples never run it)."""

    @app.task(name="invoices.render", queue="default")
    def render_invoice(ctx: JobContext, invoice_id: int) -> None:
        """Render one invoice."""

    @app.task(name="invoices.all_rendered", queue="default")
    def all_rendered(ctx: JobContext, batch_id: int) -> None:
        """A batch's callback."""

    @app.task(name="reports.extract", queue="default")
    def extract(ctx: JobContext, day: str) -> int:
        """One step of the report workflow."""
        return 0

    @app.task(name="reports.publish", queue="default")
    def publish(ctx: JobContext, upstream: dict[str, Any]) -> None:
        """The last step of the report workflow."""

    return app


app = make_app()
