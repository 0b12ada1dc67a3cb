"""Schemathesis over the OpenAPI document: generated requests (with the admin token) never
get a 5xx, an undocumented status code or a body that breaks the document's schema; malformed
requests never get a 5xx. Kept short (a bounded number of examples) so it runs in every suite.

Schemathesis's pytest plugin does not run under this pytest, so the strategies are driven
with Hypothesis directly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.admin.conftest import ADMIN, serve

CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def api_schema(make_database_url: Any) -> Iterator[Any]:
    """The served application's OpenAPI document, over a SQLite ledger with a few jobs."""
    for served in serve(make_database_url("sqlite")):
        client = served.app.client
        client.enqueue([client.build("admin.add", [1, 2]), client.build("admin.boom")])
        yield schemathesis.openapi.from_asgi("/openapi.json", served.http, headers=ADMIN)


def test_valid_requests_conform_to_the_document(api_schema: Any) -> None:
    @FUZZ
    @given(case=api_schema.as_strategy(GenerationMode.POSITIVE))
    def check(case: Any) -> None:
        case.call_and_validate(headers=ADMIN, checks=CONFORMANCE)

    check()


def test_malformed_requests_never_get_a_server_error(api_schema: Any) -> None:
    @FUZZ
    @given(case=api_schema.as_strategy(GenerationMode.NEGATIVE))
    def check(case: Any) -> None:
        case.call_and_validate(headers=ADMIN, checks=[not_a_server_error])

    check()


def test_requests_without_a_valid_token_are_refused(api_schema: Any) -> None:
    # The Gatekeeper refuses them from their headers, before the body is read or validated:
    # even a malformed request gets 401, never a 422 (its body parsed) or a 5xx.
    @settings(FUZZ, max_examples=100)
    @given(case=api_schema.as_strategy(GenerationMode.NEGATIVE))
    def check(case: Any) -> None:
        headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        case.headers = headers
        response = case.call()
        if case.path.startswith("/health"):
            assert response.status_code in (200, 503), case.path
        else:
            assert response.status_code == 401, (case.method, case.path, response.status_code)

    check()
