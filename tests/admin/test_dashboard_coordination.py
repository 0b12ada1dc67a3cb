"""The overview's Coordination section over a real ledger (every backend): schedules with their
next tick and last run, recent workflows, held locks and circuit breakers, every value escaped,
and a "none" line for each empty list."""

from __future__ import annotations

import html
from datetime import timedelta

from ledgerq import JobContext
from ledgerq.app import schedule_ops, wiring
from ledgerq.core.schedules import ScheduleRequest
from tests.admin.conftest import READ_TOKEN, Served
from tests.admin.test_breakers import open_breaker

SECTIONS = ("schedules", "workflows", "locks", "breakers")


def overview(served: Served) -> str:
    """The overview page as a session signed in with the read token sees it."""
    served.client.post(
        "/dashboard/login",
        content=f"token={READ_TOKEN}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    page = served.client.get("/dashboard", follow_redirects=False)
    assert page.status_code == 200, page.text
    return page.text


def test_empty_coordination_lists_say_none(served: Served) -> None:
    page = overview(served)
    assert "<h2>Coordination</h2>" in page
    for name in SECTIONS:
        assert f'<p class=empty id="{name}">none</p>' in page
        assert f'<table id="{name}">' not in page


def test_coordination_section_shows_schedules_workflows_locks_and_breakers(
    served: Served,
) -> None:
    app = served.app

    @app.task(name="admin.step", queue="parked")
    def step(ctx: JobContext) -> None:
        return None

    ops = schedule_ops.schedule_ops(app.settings, app.parts, app.registry, app.schedules)
    ops.add_schedule(ScheduleRequest("tick<b>", cron="* * * * * *", task="admin.add", args=(1, 2)))
    ops.add_schedule(
        ScheduleRequest("nightly", cron="0 3 * * *", task="admin.add", tz="Asia/Tokyo")
    )
    ops.pause_schedule("nightly")
    # The ticking schedule owes the last two seconds: one scheduler pass fires them.
    store = wiring.schedule_store(app.parts)
    store.advance("tick<b>", last_tick=store.database_now() - timedelta(seconds=2), next_tick=None)
    assert app.scheduler(instance_id="s1").run_once().fired.get("tick<b>", 0) >= 1
    (newest,) = ops.list_runs("tick<b>", limit=1)

    flow = app.workflow("report <b>now</b>")
    flow.step(step.s(), name="only")
    workflow_id = flow.enqueue()
    open_breaker(app, "breaker:admin.step")

    with app.lock("export<1>", ttl=60, owner="ops&co") as lock:
        page = overview(served)

    for name in SECTIONS:
        assert f'<table id="{name}">' in page and f'<p class=empty id="{name}">' not in page
    assert "tick&lt;b&gt;" in page and "tick<b>" not in page
    assert f'<a href="/dashboard/jobs/{newest.job_id}">job {newest.job_id}</a>' in page
    nightly = page.split('<tr data-schedule="nightly">', 1)[1].split("</tr>", 1)[0]
    assert "<code>0 3 * * *</code>" in nightly and "Asia/Tokyo" in nightly
    assert "<td>paused</td>" in nightly and nightly.endswith(
        '<td>-</td><td>-</td><td><button class="act"'
        ' data-action="/admin/schedules/nightly/resume">Resume</button></td>'
    )  # not passed over, and a paused schedule offers to resume
    ticking = page.split('<tr data-schedule="tick&lt;b&gt;">', 1)[1].split("</tr>", 1)[0]
    assert "<td>active</td>" in ticking and "<td>-</td>" not in ticking
    assert 'data-action="/admin/schedules/tick%3Cb%3E/pause">Pause</button>' in ticking

    assert html.escape("report <b>now</b>") in page and "<b>now</b>" not in page
    assert f'<td><a href="/dashboard/workflows/{workflow_id}">{workflow_id}</a></td>' in page
    assert '<span class="state running">running</span>' in page and ">0/1</td>" in page

    assert "export&lt;1&gt;" in page and "ops&amp;co" in page and "ops&co" not in page
    assert f"<td class=num>{lock.token}</td>" in page
    assert "<td>breaker:admin.step</td>" in page
    assert '<span class="state open">open</span>' in page
