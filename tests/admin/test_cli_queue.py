"""``ledgerq queue pause|resume``: the same controls as the HTTP API, from the shell."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ledgerq.cli.main import main
from tests.admin.tasks_app import make_app


def test_pause_and_resume_from_the_cli(
    make_database_url: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    url = make_database_url("sqlite")
    app = make_app(database_url=url)
    client = app.client
    client.enqueue([client.build("admin.add", [1, 1])])
    assert main(["--database-url", url, "queue", "pause", "default"]) == 0
    claim = {"queues": ["default"], "worker_id": "w", "limit": 5, "lease_seconds": 30.0}
    assert client.store.claim_jobs(**claim) == []
    assert main(["--database-url", url, "queue", "resume", "default"]) == 0
    assert len(client.store.claim_jobs(**claim)) == 1
    assert main(["--database-url", url, "queue", "pause", "bad name!"]) == 1
    err = capsys.readouterr().err
    assert "invalid queue name" in err and "Traceback" not in err
    app.close()
