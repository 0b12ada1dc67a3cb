"""The dashboard's pages over a real ledger (every backend), as a signed-in session reads
them: batches with their progress, a workflow's DAG with each step's state, a job's item
progress and its links to its batch and workflow (and back), the error header, the stopped
worker, the charts' server-side history and the live coordination fragment."""

from __future__ import annotations

import json
import re
from html import unescape

from tests.admin import dashboard_scene
from tests.admin.conftest import READ, READ_TOKEN, Served


def sign_in(served: Served) -> None:
    """Sign the test client in with the read token (a session cookie)."""
    response = served.client.post(
        "/dashboard/login",
        content=f"token={READ_TOKEN}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text


def page(served: Served, path: str) -> str:
    response = served.client.get(path, follow_redirects=False)
    assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return response.text


def test_batch_workflow_and_job_pages_link_to_each_other(served: Served) -> None:
    app = served.app
    scene = dashboard_scene.build(app)
    dashboard_scene.run(app, scene)
    sign_in(served)

    listing = page(served, "/dashboard/batches")
    row = listing.split(f'<tr data-batch-id="{scene.batch_id}">', 1)[1].split("</tr>", 1)[0]
    assert f'<a href="/dashboard/batches/{scene.batch_id}">' in row
    assert "5 / 5" in row and "3 succeeded" in row and "2 dead" in row
    assert row.count("<rect class=") == 3  # the track, the succeeded and the dead segments

    batch = page(served, f"/dashboard/batches/{scene.batch_id}")
    for job_id in scene.member_ids:
        assert f'<a href="/dashboard/jobs/{job_id}">{job_id}</a>' in batch
    assert f'data-action="/api/v1/batches/{scene.batch_id}/retry-failed"' in batch

    job = page(served, f"/dashboard/jobs/{scene.items_job}")
    assert f'<a id=job-batch href="/dashboard/batches/{scene.batch_id}">' in job
    assert '<progress value="3" max="5">' in job and "3 / 5" in job
    header = re.search(r"<p class=error id=job-error>(.*?)</p>", job)
    assert header is not None and unescape(header.group(1)) == "RuntimeError: item 3 failed"
    boom = page(served, f"/dashboard/jobs/{scene.boom_job}")
    assert (
        "RuntimeError: batch member failed</p>" in boom and "RuntimeError: RuntimeError" not in boom
    )

    flows = page(served, "/dashboard/workflows")
    assert f'<a href="/dashboard/workflows/{scene.workflow_id}">' in flows
    workflow = page(served, f"/dashboard/workflows/{scene.workflow_id}")
    states = dict(
        re.findall(r'<g class="node [a-z_]+" data-step="(\w+)" data-state="(\w+)"', workflow)
    )
    assert states == {
        "extract": "succeeded",
        "clean": "succeeded",
        "enrich": "failed",
        "report": "cancelled",
    }
    assert workflow.count("<path class=edge") == 4
    step_jobs = dict(re.findall(r'<tr data-step="(\w+)">.*?/dashboard/jobs/(\d+)"', workflow))
    assert set(step_jobs) == {"extract", "clean", "enrich"}  # report never got a job
    extract = page(served, f"/dashboard/jobs/{step_jobs['extract']}")
    assert f'<a id=job-workflow href="/dashboard/workflows/{scene.workflow_id}">' in extract

    document = served.client.get(f"/api/v1/jobs/{scene.items_job}", headers=READ).json()
    assert (document["batch_id"], document["workflow_id"]) == (scene.batch_id, None)
    batches = served.client.get("/api/v1/batches", headers=READ).json()["batches"]
    assert [(b["id"], b["finished"], b["size"]) for b in batches] == [(scene.batch_id, 5, 5)]


def test_overview_starts_its_charts_from_history_and_lists_stopped_workers(
    served: Served,
) -> None:
    app = served.app
    scene = dashboard_scene.build(app)
    dashboard_scene.run(app, scene)  # the worker stops cleanly at the end
    history = served.client.get("/admin/metrics/history?minutes=60", headers=READ).json()
    minutes = history["minutes"]
    assert len(minutes) == 60
    # 3 batch members and 2 workflow steps succeeded; 2 members and a step died.
    assert sum(m["succeeded"] for m in minutes) == 5
    assert sum(m["dead"] for m in minutes) == 3
    too_long = served.client.get("/admin/metrics/history?minutes=100000", headers=READ)
    assert too_long.status_code == 422

    sign_in(served)
    overview = page(served, "/dashboard")
    seeded = json.loads(unescape(overview.split('data-history="', 1)[1].split('"', 1)[0]))
    assert len(seeded["succeeded"]) == 60 and sum(seeded["succeeded"]) == 5
    assert sum(seeded["dead"]) == 3
    assert re.search(r'<tr data-worker="[^"]+" data-status="stopped">', overview)
    assert "(0 active)" in overview

    workers = served.client.get("/admin/queue/workers?include_inactive=true", headers=READ)
    assert [w["status"] for w in workers.json()["workers"]] == ["stopped"]
    assert served.client.get("/admin/queue/workers", headers=READ).json()["workers"] == []

    fragment = page(served, "/dashboard/fragments/coordination")
    assert fragment.startswith("<section id=coordination>")
    assert f'<a href="/dashboard/workflows/{scene.workflow_id}">' in fragment
    served.client.cookies.clear()
    assert served.client.get("/dashboard/fragments/coordination").status_code == 401
