"""docs/producers-http.md is executed: every JSON body on the page (request bodies of its curl
examples and the answers it shows) is validated against the server's OpenAPI document, and
every curl example runs, in order, against a real ``ledgerq serve`` process on a fresh ledger
and must get the status the page says (``<!-- expect: N -->``), with an answer that fits the
document's schema for that status."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest

from tests.admin.test_serve_process import call, free_port
from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "producers-http.md"
ADMIN_TOKEN = "doc-admin-token-0123456789"
READ_TOKEN = "doc-read-token-0123456789"
PRODUCER_TOKEN = "doc-producer-token-0123456789"
MARKER = re.compile(r"<!-- (expect|schema): (\S+) -->")
FENCE = re.compile(r"^(\s*)```(\w+)\s*$")


@dataclass(frozen=True)
class Block:
    """A fenced code block of the page and the marker just above it (if any)."""

    language: str
    text: str
    marker: tuple[str, str] | None
    line: int


def blocks(page: str) -> list[Block]:
    """Every fenced block, dedented, with the marker comment that precedes it."""
    found: list[Block] = []
    lines = page.splitlines()
    marker: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        seen = MARKER.search(lines[i])
        fence = FENCE.match(lines[i])
        if seen:
            marker = (seen.group(1), seen.group(2))
        elif fence:
            language = fence.group(2)
            end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
            body = textwrap.dedent("\n".join(lines[i + 1 : end]))
            found.append(Block(language, body, marker, i + 1))
            marker, i = None, end
        elif lines[i].strip():
            marker = None  # a marker belongs to the block right below it
        i += 1
    return found


def validator(document: dict[str, Any], schema: dict[str, Any]) -> Any:
    """A JSON Schema validator of ``schema``, whose $refs point into ``document``."""
    return jsonschema_rs.Draft202012Validator(
        {**schema, "components": document["components"]}, validate_formats=True
    )


def operation_of(document: dict[str, Any], method: str, url: str) -> dict[str, Any]:
    """The OpenAPI operation serving ``method url`` (path templates matched)."""
    path = url.split("?")[0]
    if path == "/openapi.json":
        return {"responses": {}}  # the document does not describe itself
    for template, operations in document["paths"].items():
        pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
        if re.match(pattern, path) and method.lower() in operations:
            found: dict[str, Any] = operations[method.lower()]
            return found
    raise AssertionError(f"{method} {path} is not in the OpenAPI document")


def curl_request(command: str) -> tuple[str, str, Any]:
    """Method, path and JSON body (or None) of a curl example."""
    method = re.search(r"-X (\w+)", command)
    url = re.search(r'"\$LEDGERQ_URL(/[^"]*)"', command)
    assert url, command
    body = re.search(r"-d '(.*?)'", command, re.DOTALL)
    return (
        method.group(1) if method else "GET",
        url.group(1),
        json.loads(body.group(1)) if body else None,
    )


@pytest.fixture(scope="module")
def page_blocks() -> list[Block]:
    return blocks(PAGE.read_text())


@pytest.fixture
def serve(make_database_url: Callable[[str], str], tmp_path: Path) -> Iterator[str]:
    """A ``ledgerq serve`` process of the page's application; yields its base URL."""
    port = free_port()
    env = {
        **os.environ,
        "LEDGERQ_DATABASE_URL": make_database_url("sqlite"),
        "LEDGERQ_API_TOKEN": ADMIN_TOKEN,
        "LEDGERQ_API_READ_TOKEN": READ_TOKEN,
        "LEDGERQ_API_PRODUCER_TOKEN": f"billing:{PRODUCER_TOKEN}",
    }
    command = [sys.executable, "-m", "ledgerq.cli.main", "--app"]
    command += ["tests.admin.producer_doc_app:app", "serve", "--port", str(port)]
    with (tmp_path / "serve.log").open("w") as log:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stderr=log, stdout=log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: call(f"{base}/health/live") == 200, what="serve answers")
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def test_every_example_is_marked_and_the_page_has_them_all(page_blocks: list[Block]) -> None:
    curls = [b for b in page_blocks if b.language == "sh"]
    shown = [b for b in page_blocks if b.language == "json"]
    assert len(curls) >= 10 and len(shown) >= 5
    for block in curls:
        assert block.marker and block.marker[0] == "expect", f"line {block.line}: no expect"
    for block in shown:
        assert block.marker and block.marker[0] == "schema", f"line {block.line}: no schema"
    paths = {curl_request(b.text)[:2] for b in curls}
    for route in ("/api/v1/jobs", "/api/v1/jobs/bulk", "/api/v1/batches", "/api/v1/workflows"):
        assert ("POST", route) in paths, route


def test_every_example_fits_the_openapi_document(
    page_blocks: list[Block], served_sqlite: Any
) -> None:
    from tests.admin.conftest import ADMIN

    document = served_sqlite.client.get("/openapi.json", headers=ADMIN).json()
    checked = 0
    for block in page_blocks:
        if block.language == "json":
            assert block.marker is not None
            name = block.marker[1]
            schema = {"$ref": f"#/components/schemas/{name}"}
            errors = [
                e.message for e in validator(document, schema).iter_errors(json.loads(block.text))
            ]
            assert not errors, (block.line, name, errors)
            checked += 1
        elif block.language == "sh":
            method, path, body = curl_request(block.text)
            operation = operation_of(document, method, path)
            if body is not None:
                schema = operation["requestBody"]["content"]["application/json"]["schema"]
                errors = [e.message for e in validator(document, schema).iter_errors(body)]
                assert not errors, (block.line, errors)
                checked += 1
    assert checked >= 12


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_every_curl_example_gets_its_status_from_ledgerq_serve(
    page_blocks: list[Block], serve: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "LEDGERQ_URL": serve,
        "LEDGERQ_PRODUCER_TOKEN": PRODUCER_TOKEN,
        "LEDGERQ_READ_TOKEN": READ_TOKEN,
    }
    document = json.loads(
        subprocess.run(
            ["curl", "-sS", f"{serve}/openapi.json", "-H", f"Authorization: Bearer {ADMIN_TOKEN}"],
            capture_output=True,
            check=True,
            timeout=30,
        ).stdout
    )
    answer = tmp_path / "answer.json"
    ran = 0
    for block in page_blocks:
        if block.language != "sh":
            continue
        assert block.marker is not None
        expected = int(block.marker[1])
        # The example as printed, plus where to put the body and what to print.
        script = f"{block.text.rstrip()} -o '{answer}' -w '%{{http_code}}'"
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, (block.line, done.stderr)
        assert int(done.stdout) == expected, (block.line, done.stdout, answer.read_text()[:500])
        method, path, _ = curl_request(block.text)
        responses = operation_of(document, method, path)["responses"]
        if str(expected) in responses:
            schema = responses[str(expected)]["content"]["application/json"]["schema"]
            errors = [
                e.message
                for e in validator(document, schema).iter_errors(json.loads(answer.read_text()))
            ]
            assert not errors, (block.line, errors)
        ran += 1
    assert ran >= 10


def test_every_operation_declares_its_bodies(served_sqlite: Any) -> None:
    # What a generated client needs: each answer's schema, and each body's (the actions
    # without a body, /metrics' text and a 204 aside).
    from tests.admin.conftest import ADMIN

    document = served_sqlite.client.get("/openapi.json", headers=ADMIN).json()
    operations = 0
    for path, methods in document["paths"].items():
        for method, operation in methods.items():
            operations += 1
            for code, answer in operation["responses"].items():
                if code == "204" or path == "/metrics":
                    continue
                schema = answer["content"]["application/json"]["schema"]
                assert schema, (method, path, code)
            if method == "post" and path in ("/api/v1/jobs", "/api/v1/jobs/bulk"):
                assert operation["requestBody"]["required"], path
                assert "413" in operation["responses"] or path == "/api/v1/jobs"
    assert operations > 30
