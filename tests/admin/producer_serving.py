"""The HTTP application with producer tokens as well (two named producers), for the tests of
the producer role, bulk enqueue and batches and workflows over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fastapi.testclient import TestClient

from ledgerq.cli.commands.serve_cmd import build_http
from tests.admin.conftest import ADMIN_TOKEN, READ_TOKEN, Served
from tests.admin.tasks_app import make_app

BILLING_TOKEN = "billing-producer-token-for-tests"
CRM_TOKEN = "crm-producer-token-for-tests"
BILLING = {"Authorization": f"Bearer {BILLING_TOKEN}"}
CRM = {"Authorization": f"Bearer {CRM_TOKEN}"}
PRODUCERS = [("billing", BILLING_TOKEN), ("crm", CRM_TOKEN)]


def serve_producers(database_url: str, **settings: Any) -> Iterator[Served]:
    """The test application over ``database_url`` with admin, read and producer tokens."""
    app = make_app(database_url=database_url, **settings)
    http = build_http(
        app, admin_tokens=[ADMIN_TOKEN], read_tokens=[READ_TOKEN], producers=PRODUCERS
    )
    with TestClient(http, base_url="http://127.0.0.1") as client:
        yield Served(app, http, client)
    app.close()
