"""``ledgerq workflow list|show|cancel|retry`` in-process through ``main(argv)``: JSON for
machines, a tree for people, one-line errors for mistakes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from ledgerq import JobContext, LedgerQ
from ledgerq.cli.main import main


@pytest.fixture
def workflow_id(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A workflow a -> b whose first step waits on a queue no worker serves."""
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    app = LedgerQ(database_url=database_url)

    @app.task(queue="parked")
    def fetch(ctx: JobContext, upstream: dict[str, Any] | None = None) -> None:
        return None

    flow = app.workflow("nightly-report", on_failure="continue")
    first = flow.step(fetch.s(), name="a")
    flow.step(fetch.s(), after=[first], name="b")
    yield flow.enqueue()
    app.close()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_show_cancel_retry(workflow_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--json", "workflow", "list")
    listed = json.loads(out)
    assert code == 0 and [w["id"] for w in listed] == [workflow_id]
    assert listed[0]["state"] == "running" and listed[0]["steps_total"] == 2

    code, out, _ = run(capsys, "--json", "workflow", "show", workflow_id)
    shown = json.loads(out)
    assert code == 0 and shown["on_failure"] == "continue"
    assert [(s["name"], s["state"], s["depends_on"]) for s in shown["steps"]] == [
        ("a", "queued", []),
        ("b", "waiting", ["a"]),
    ]

    code, out, _ = run(capsys, "workflow", "show", workflow_id)
    assert code == 0 and "nightly-report" in out and "a" in out and "waiting" in out

    code, out, _ = run(capsys, "--json", "workflow", "cancel", workflow_id)
    assert code == 0 and json.loads(out) == {"id": workflow_id, "state": "cancelled"}
    code, out, _ = run(capsys, "--json", "workflow", "list", "--state", "cancelled")
    assert [w["id"] for w in json.loads(out)] == [workflow_id]

    code, out, _ = run(capsys, "workflow", "retry", workflow_id)
    assert code == 0 and f"workflow {workflow_id} is now running" in out
    code, out, _ = run(capsys, "--json", "workflow", "show", workflow_id)
    assert [s["state"] for s in json.loads(out)["steps"]] == ["queued", "waiting"]


def test_mistakes_get_one_line_errors(workflow_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "workflow", "show", "no-such-workflow")
    assert code == 1 and err.strip() == "error: no workflow with id 'no-such-workflow'"
    code, _, err = run(capsys, "workflow", "retry", workflow_id)
    assert code == 1 and "no failed or cancelled step" in err and "Traceback" not in err
    assert run(capsys, "workflow", "cancel", workflow_id)[0] == 0
    code, _, err = run(capsys, "workflow", "cancel", workflow_id)
    assert code == 1 and "cannot be cancelled" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "workflow", "list", "--state", "bogus")
    assert code == 2 and "bogus" in err
