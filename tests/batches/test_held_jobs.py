"""Held jobs on every backend: never claimed until started (CLI ``job start`` or ``POST
/api/v1/jobs/{id}/start``), and deleted with their folder by the reconciler once their
deadline passes unstarted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ledgerq.cli.main import main
from ledgerq.core import errors
from ledgerq.core.states import JobState
from ledgerq.runtime.reconciler import ReconcilePolicy, Reconciler
from ledgerq.transport.polling import PollingTransport
from tests.admin.conftest import ADMIN, READ, Served, serve
from tests.helpers import running_worker, wait_until

S = JobState


@pytest.fixture
def served(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", database_url)
    yield from serve(database_url)


def held_job(served: Served, **options: object) -> int:
    job = served.app.client.build("admin.add", (1, 2), held=True, **options)  # type: ignore[arg-type]
    return served.app.client.enqueue([job])[0].job_id


def test_held_jobs_wait_for_a_start_from_the_cli_or_http(
    served: Served, capsys: pytest.CaptureFixture[str]
) -> None:
    by_cli, by_http = held_job(served), held_job(served)
    plain = served.app.client.enqueue([served.app.client.build("admin.add", (3, 4))])[0].job_id
    with running_worker(served.app, poll_interval_seconds=0.05):
        # The worker claimed and ran the job queued after them; the held ones wait.
        wait_until(lambda: served.app.client.get(plain).state is S.SUCCEEDED, what="plain job")
        assert served.app.client.get(by_cli).state is S.HELD
        assert served.app.client.get(by_http).state is S.HELD

        assert main(["job", "start", str(by_cli)]) == 0
        # Queued by the start (a fast worker may have claimed it before the command replied).
        assert capsys.readouterr().out.split()[-1] in ("queued", "running", "succeeded")
        wait_until(lambda: served.app.client.get(by_cli).state is S.SUCCEEDED, what="cli start")
        assert served.app.client.get(by_http).state is S.HELD

        assert served.client.post(f"/api/v1/jobs/{by_http}/start").status_code == 401
        assert served.client.post(f"/api/v1/jobs/{by_http}/start", headers=READ).status_code == 403
        started = served.client.post(f"/api/v1/jobs/{by_http}/start", headers=ADMIN)
        assert started.status_code == 200
        assert started.json()["state"] in ("queued", "running", "succeeded")
        wait_until(lambda: served.app.client.get(by_http).state is S.SUCCEEDED, what="http start")

    again = served.client.post(f"/api/v1/jobs/{by_http}/start", headers=ADMIN)
    assert again.status_code == 409 and "succeeded" in again.json()["detail"]
    assert served.client.post("/api/v1/jobs/999999/start", headers=ADMIN).status_code == 404
    assert main(["job", "start", str(by_cli)]) == 1
    assert "cannot become queued" in capsys.readouterr().err
    with pytest.raises(errors.InvalidTransition):
        served.app.client.start(by_cli)


def test_a_held_job_not_started_by_its_deadline_is_deleted_with_its_folder(
    served: Served, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    expired = held_job(served, expires_at=now - timedelta(seconds=1))
    later = held_job(served, expires_at=now + timedelta(hours=1))
    kept = held_job(served)
    for job_id in (expired, later, kept):
        (tmp_path / str(job_id)).mkdir()
        (tmp_path / str(job_id) / "upload.part").write_text("half an upload")
    app = served.app
    policy = ReconcilePolicy(artifact_root=tmp_path)
    report = Reconciler(app.parts.repair, app.parts.store, PollingTransport(), policy).run_once()
    # Only the job past its deadline goes, with its folder; one before its deadline stays.
    assert (report.deleted_expired, report.folders_removed) == (1, 1)
    assert not (tmp_path / str(expired)).exists()
    with pytest.raises(errors.JobNotFound):
        app.client.get(expired)
    for job_id in (later, kept):
        assert (tmp_path / str(job_id) / "upload.part").exists()
        assert app.client.get(job_id).state is S.HELD
