"""Fixtures of the admin suite: the HTTP application over a fresh ledger, with tokens."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ledgerq import LedgerQ
from ledgerq.cli.commands.serve_cmd import build_http
from tests.admin.tasks_app import make_app

ADMIN_TOKEN = "admin-token-for-tests"
READ_TOKEN = "read-token-for-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}


@dataclass
class Served:
    """An application, its HTTP app and an HTTP client without credentials."""

    app: LedgerQ
    http: FastAPI
    client: TestClient


def serve(database_url: str, **settings: object) -> Iterator[Served]:
    """Build the HTTP application of a test app over ``database_url``."""
    app = make_app(database_url=database_url, **settings)
    http = build_http(app, admin_tokens=[ADMIN_TOKEN], read_tokens=[READ_TOKEN])
    with TestClient(http, base_url="http://127.0.0.1") as client:
        yield Served(app, http, client)
    app.close()


@pytest.fixture
def served(database_url: str) -> Iterator[Served]:
    """The HTTP application over each backend in turn."""
    yield from serve(database_url)


@pytest.fixture
def served_sqlite(make_database_url: object) -> Iterator[Served]:
    """The HTTP application over SQLite only (for tests of the HTTP layer itself)."""
    yield from serve(make_database_url("sqlite"))  # type: ignore[operator]
