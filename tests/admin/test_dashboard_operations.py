"""The dashboard's failover page and bulk retry of dead jobs over a real ledger (every
backend), as a signed-in session reads and uses them: a failed-over worker's event lists the
jobs it moved (linked), the dead worker's row on the overview links to it; the retry's
confirmation page counts without moving anything, and its button's request (CSRF, as the
page's script sends it) queues the dead jobs again."""

from __future__ import annotations

import json
import re
from html import unescape

from ledgerq.core.states import JobState
from tests.admin.conftest import ADMIN_TOKEN, Served
from tests.admin.dashboard_scene import DETECTED_BY, LOST, fail_over_a_busy_worker
from tests.admin.test_requeue_failed import bury


def sign_in(served: Served, token: str = ADMIN_TOKEN) -> str:
    """Sign the test client in; return the session's CSRF token (from a page's meta tag)."""
    response = served.client.post(
        "/dashboard/login",
        content=f"token={token}".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    found = re.search(r'name=csrf-token content="([0-9a-f]+)"', page(served, "/dashboard"))
    assert found is not None
    return found.group(1)


def page(served: Served, path: str) -> str:
    response = served.client.get(path, follow_redirects=False)
    assert response.status_code == 200, (path, response.status_code, response.text[:300])
    return response.text


def test_failover_page_lists_the_moved_jobs_and_a_dead_worker_links_to_it(
    served: Served,
) -> None:
    requeued, buried = fail_over_a_busy_worker(served.app)
    sign_in(served)

    overview = page(served, "/dashboard")
    assert '<a href="/dashboard/failovers">Failovers</a>' in overview  # in the navigation
    row = overview.split(f'<tr data-worker="{LOST}" data-status="dead">', 1)[1].split("</tr>")[0]
    link = "/dashboard/failovers?worker=w-lost%40host-c"
    assert f'<a class=failovers href="{link}">failovers</a>' in row

    listing = page(served, link)
    (event,) = re.findall(r'<tr data-event-id="\d+" data-worker="([^"]+)">(.*?)</tr>', listing)
    assert event[0] == LOST
    cells = re.findall(r"<td[^>]*>(.*?)</td>", event[1])
    assert cells[2] == DETECTED_BY
    assert f'data-kind="requeued" href="/dashboard/jobs/{requeued}">#{requeued}</a>' in cells[4]
    assert f'data-kind="dead" href="/dashboard/jobs/{buried}">#{buried}</a>' in cells[5]
    assert re.fullmatch(r"\d+\.\d ms", cells[6])
    # Another worker's filter lists nothing; the page without one lists every event.
    assert "class=empty>none</td>" in page(served, "/dashboard/failovers?worker=someone")
    assert f'data-worker="{LOST}"' in page(served, "/dashboard/failovers")
    served.client.cookies.clear()
    gone = served.client.get("/dashboard/failovers", follow_redirects=False)
    assert (gone.status_code, gone.headers["location"]) == (303, "/dashboard/login")


def test_bulk_retry_counts_first_then_queues_the_dead_jobs_again(served: Served) -> None:
    app = served.app
    boom = bury(app, "admin.boom", ["x"], 2)
    flaky = bury(app, "admin.flaky", [], 1)
    csrf = sign_in(served)

    overview = page(served, "/dashboard")
    mail = overview.split('<tr data-queue="mail">', 1)[1].split("</tr>", 1)[0]
    assert '<a class=retry-dead href="/dashboard/retry-dead?queue=mail">Retry dead</a>' in mail
    jobs = page(served, "/dashboard/jobs?state=dead&task=admin.boom")
    assert 'href="/dashboard/retry-dead?task=admin.boom"' in jobs

    confirm = page(served, "/dashboard/retry-dead?queue=mail")
    assert "3 dead job(s) match" in confirm and "Retry 3 dead job(s)</button>" in confirm
    counts = re.findall(r'<tr data-queue="mail" data-task="([^"]+)">.*?num>(\d+)<', confirm)
    assert counts == [("admin.boom", "2"), ("admin.flaky", "1")]
    assert {app.client.get(i).state for i in boom + flaky} == {JobState.DEAD}  # a dry run
    found = re.search(r'data-action="([^"]+)" data-body="([^"]+)"', confirm)
    assert found is not None
    action, body = found.group(1), json.loads(unescape(found.group(2)))
    assert (action, body) == ("/admin/queue/requeue-failed", {"queue": "mail"})
    assert "No dead job matches" in page(served, "/dashboard/retry-dead?queue=default")
    only = page(served, "/dashboard/retry-dead?task=admin.flaky")
    assert "Retry 1 dead job(s)" in only
    bad = served.client.get("/dashboard/retry-dead?queue=bad%20name!")
    assert bad.status_code == 422 and "Traceback" not in bad.text

    # What the button sends: refused without the session's CSRF token, done with it.
    assert served.client.post(action, json=body).status_code == 403
    done = served.client.post(action, json=body, headers={"X-CSRF-Token": csrf})
    assert done.status_code == 200, done.text
    assert done.json()["total"] == 3
    assert {app.client.get(i).state for i in boom + flaky} == {JobState.QUEUED}
    assert "No dead job matches" in page(served, "/dashboard/retry-dead?queue=mail")
