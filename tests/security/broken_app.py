"""The admin tests' application with a bug: listing workflows raises an error whose text names
the database URL, password included, as a driver's error might.
``ledgerq --app tests.security.broken_app:app serve`` (only that process imports it)."""

from __future__ import annotations

from typing import Any

from ledgerq.producer.workflow_api import Workflows
from tests.admin.tasks_app import make_app

app = make_app()


def _list_fails(_self: Workflows, *_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError(f"lost the ledger at {app.settings.database_url.get_secret_value()}")


Workflows.list = _list_fails  # type: ignore[method-assign]
