"""Fixtures shared by the integration tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ledgerq import LedgerQ


@pytest.fixture
def app(database_url: str) -> Iterator[LedgerQ]:
    """An application on a fresh, migrated ledger of each database (``database_url``)."""
    application = LedgerQ(database_url=database_url)
    yield application
    application.close()
