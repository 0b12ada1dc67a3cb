"""An unhandled error in ``ledgerq serve`` is logged through the process's structured logging
(one JSON line with LEDGERQ_LOG_FORMAT=json) and its secret masking, not as uvicorn's plain
multi-line traceback (issue 22, item 5)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

from tests.admin.conftest import ADMIN_TOKEN
from tests.security.conftest import StartServe

PASSWORD = "hunter2-db-password"


def test_an_unhandled_error_is_one_json_line_without_the_password(
    start_serve: StartServe, make_database_url: Callable[[str], str]
) -> None:
    url = make_database_url("postgresql")
    scheme, _, rest = url.partition("://")
    user, _, host = rest.partition("@")
    served = start_serve(
        f"{scheme}://{user.split(':')[0]}:{PASSWORD}@{host}",
        app="tests.security.broken_app:app",
        LEDGERQ_LOG_FORMAT="json",
        LEDGERQ_LOG_LEVEL="INFO",
    )
    request = urllib.request.Request(f"{served.base}/api/v1/workflows")
    request.add_header("Authorization", f"Bearer {ADMIN_TOKEN}")
    try:
        urllib.request.urlopen(request, timeout=10)
        raise AssertionError("the broken route answered")
    except urllib.error.HTTPError as exc:
        assert exc.code == 500
        body = exc.read().decode()
    assert PASSWORD not in body and "lost the ledger" not in body
    err = served.stop()
    assert PASSWORD not in err
    lines = [line for line in err.splitlines() if line.strip()]
    for line in lines:
        assert line.startswith("{"), f"not a JSON line: {line!r}"
        json.loads(line)
    errors = [json.loads(line) for line in lines if "lost the ledger" in line]
    assert len(errors) == 1, errors
    assert (
        errors[0]["level"] == "ERROR"
        and errors[0]["component"] == "serve"
        and "RuntimeError" in json.dumps(errors[0])
    )
