"""Bulk retry of dead jobs from the shell (``ledgerq queue requeue-failed``) and over HTTP
(``POST /admin/queue/requeue-failed``, admin role), on every backend: filters, dry run,
counts, and the jobs moved really run again."""

from __future__ import annotations

import json

import pytest

from ledgerq import LedgerQ
from ledgerq.cli.main import main
from ledgerq.core.job import Claim
from ledgerq.core.ports import Completion
from ledgerq.core.states import JobState
from tests.admin.conftest import ADMIN, READ, Served

S = JobState


def bury(app: LedgerQ, task: str, args: list[object], n: int) -> list[int]:
    """``n`` jobs of ``task`` that ran once and died."""
    client = app.client
    ids = [r.job_id for r in client.enqueue([client.build(task, args) for _ in range(n)])]
    queue = client.get(ids[0]).queue
    claimed = client.store.claim_jobs(queues=[queue], worker_id="w", limit=n, lease_seconds=60)
    client.store.complete_jobs(
        [Completion(Claim(j.id, j.attempt), S.DEAD, error_json="{}") for j in claimed]
    )
    assert {client.get(i).state for i in ids} == {S.DEAD}
    return ids


def cli(url: str, capsys: pytest.CaptureFixture[str], *argv: str, code: int = 0) -> str:
    capsys.readouterr()
    assert main(["--database-url", url, *argv]) == code
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return captured.out if code == 0 else captured.err


def test_requeue_failed_from_the_cli(served: Served, capsys: pytest.CaptureFixture[str]) -> None:
    app, url = served.app, str(served.app.settings.database_url.get_secret_value())
    boom = bury(app, "admin.boom", ["x"], 3)
    flaky = bury(app, "admin.flaky", [], 2)

    dry = json.loads(cli(url, capsys, "--json", "queue", "requeue-failed", "--dry-run"))
    assert dry == {
        "dry_run": True,
        "total": 5,
        "counts": [
            {"queue": "mail", "task": "admin.boom", "jobs": 3},
            {"queue": "mail", "task": "admin.flaky", "jobs": 2},
        ],
    }
    assert {app.client.get(i).state for i in boom + flaky} == {S.DEAD}  # nothing moved
    shown = cli(url, capsys, "queue", "requeue-failed", "--task", "admin.flaky", "--dry-run")
    assert "would requeue 2 dead job(s)" in shown and "admin.flaky" in shown
    assert "would requeue 0" in cli(
        url, capsys, "queue", "requeue-failed", "--queue", "default", "--dry-run"
    )

    moved = json.loads(
        cli(
            url,
            capsys,
            "queue",
            "requeue-failed",
            "--task",
            "admin.flaky",
            "--since",
            "1h",
            "--json",
        )
    )
    assert moved["dry_run"] is False and moved["total"] == 2
    assert [app.client.get(i).state for i in flaky] == [S.QUEUED] * 2
    assert {app.client.get(i).state for i in boom} == {S.DEAD}
    # The moved jobs really run again: flaky succeeds on its second run.
    worker = app.worker(queues=("mail",), burst=True)
    worker.run()
    assert [app.client.get(i).state for i in flaky] == [S.SUCCEEDED] * 2

    for bad, says, code in (
        (["--since", "yesterday"], "neither a duration", 2),
        (["--since", "2099-01-01T00:00:00"], "future", 2),
        (["--queue", "bad name!"], "invalid queue name", 1),
    ):
        assert says in cli(url, capsys, "queue", "requeue-failed", *bad, code=code)


def test_requeue_failed_over_http(served: Served) -> None:
    app, http = served.app, served.client
    boom = bury(app, "admin.boom", ["x"], 2)
    flaky = bury(app, "admin.flaky", [], 1)
    url = "/admin/queue/requeue-failed"

    assert http.post(url, json={}, headers=READ).status_code == 403  # admin role only
    assert http.post(url, json={}).status_code == 401
    dry = http.post(url, json={"dry_run": True, "task": "admin.boom"}, headers=ADMIN)
    assert dry.status_code == 200, dry.text
    assert dry.json() == {
        "dry_run": True,
        "total": 2,
        "counts": [{"queue": "mail", "task": "admin.boom", "jobs": 2}],
    }
    assert {app.client.get(i).state for i in boom + flaky} == {S.DEAD}

    done = http.post(url, json={"queue": "mail", "since": "10m"}, headers=ADMIN)
    assert done.status_code == 200 and done.json()["total"] == 3
    assert {app.client.get(i).state for i in boom + flaky} == {S.QUEUED}
    again = http.post(url, json={}, headers=ADMIN).json()
    assert again == {"dry_run": False, "total": 0, "counts": []}
    # One more run each, as ``job retry`` gives: boom fails it and is dead again.
    app.worker(queues=("mail",), burst=True).run()
    assert [app.client.get(i).state for i in flaky] == [S.SUCCEEDED]
    assert [(app.client.get(i).state, app.client.get(i).runs) for i in boom] == [(S.DEAD, 2)] * 2

    for body in ({"since": "soon"}, {"queue": "bad name!"}, {"surprise": 1}):
        refused = http.post(url, json=body, headers=ADMIN)
        assert refused.status_code in (400, 422), (body, refused.text)
        assert "detail" in refused.json()
