"""The dashboard: server-rendered pages (overview, jobs, job detail, sign-in) with a little
JavaScript that polls the JSON API for live numbers and sends control actions with the CSRF
header. No GET request changes anything; static files come from this package (no CDN)."""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ledgerq.admin import coordination_page, pages, schemas
from ledgerq.admin.api import audit, queue_stats, worker_documents
from ledgerq.admin.auth import SESSION_COOKIE, SESSION_SECONDS, Caller, Role, TokenAuth
from ledgerq.admin.deps import AdminDeps, job_document
from ledgerq.admin.throttle import LoginThrottle
from ledgerq.core.states import JobState

router = APIRouter(include_in_schema=False)
STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}


def session_caller(request: Request) -> Caller | None:
    """The signed-in dashboard user of ``request`` (a session cookie), or None."""
    auth: TokenAuth = request.app.state.auth
    try:
        caller = auth.authenticate(request)
    except HTTPException:
        return None
    return caller if caller.via == "session" else None


def render_page(request: Request, title: str, body: str, caller: Caller) -> HTMLResponse:
    """A whole dashboard page around ``body``, with the session's CSRF token."""
    auth: TokenAuth = request.app.state.auth
    html = pages.layout(title, body, csrf=auth.csrf_token(caller.session))
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def to_login() -> RedirectResponse:
    """Where a request without a session goes."""
    return RedirectResponse("/dashboard/login", status_code=303)


@router.get("/")
def root() -> RedirectResponse:
    """The dashboard lives under /dashboard."""
    return RedirectResponse("/dashboard", status_code=307)


@router.get("/dashboard/login")
def login_form() -> HTMLResponse:
    """The sign-in form."""
    return HTMLResponse(pages.login_page())


@router.post("/dashboard/login")
async def login(request: Request) -> Response:
    """Exchange a token for a session cookie (HttpOnly, SameSite=Strict). Wrong tokens are
    throttled per client address: past the limit the answer is 429 with Retry-After, the
    token is not even compared, and only the first refusal of a lockout is audited."""
    auth: TokenAuth = request.app.state.auth
    throttle: LoginThrottle = request.app.state.login_throttle
    client = request.client.host if request.client else "-"
    wait = throttle.retry_after(client)
    if wait:
        page = pages.login_page(f"Too many wrong tokens; try again in {wait} s.")
        return HTMLResponse(page, status_code=429, headers={"Retry-After": str(wait)})
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    role = auth.role_of(form.get("token", [""])[0])
    if role is Role.PRODUCER:  # it may enqueue and read its own jobs: no dashboard
        audit.warning("audit", action="login", outcome="producer-refused", client=client)
        return HTMLResponse(pages.login_page("A producer token cannot sign in."), status_code=403)
    if role is None:
        outcome = "throttled" if throttle.record_failure(client) else "refused"
        audit.warning("audit", action="login", outcome=outcome, client=client)
        return HTMLResponse(pages.login_page("That token is not valid."), status_code=403)
    throttle.reset(client)
    audit.info("audit", action="login", caller=role.value, client=client)
    response = RedirectResponse("/dashboard", status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        auth.new_session(role),
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


@router.post("/dashboard/logout")
def logout(request: Request) -> Response:
    """Revoke the session on the server and drop its cookie (CSRF-checked like every other
    change): a copy of the cookie no longer works either."""
    caller = session_caller(request)
    if caller is not None:
        auth: TokenAuth = request.app.state.auth
        auth.check_csrf(request, caller)
        auth.revoke(caller.session)
        audit.info("audit", action="logout", caller=caller.label)
    response = Response(status_code=204)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/dashboard/static/{name}")
def static(name: str) -> Response:
    """The dashboard's script and style sheet."""
    if name not in STATIC:
        raise HTTPException(404, "not found")
    data = resources.files("ledgerq.admin").joinpath("static", name).read_bytes()
    return Response(data, media_type=STATIC[name], headers={"Cache-Control": "max-age=300"})


#: Stopped and dead workers the overview lists after the active ones (newest first).
INACTIVE_WORKERS_SHOWN = 20
#: Minutes of history the throughput and failure charts start with.
HISTORY_MINUTES = 60


def overview_workers(deps: AdminDeps) -> list[dict[str, Any]]:
    """Active workers, then the most recently seen stopped and dead ones."""
    views = deps.reads.fleet.list_workers(include_inactive=True)
    active = [v for v in views if v.status in ("active", "running")]
    inactive = [v for v in views if v.status not in ("active", "running")]
    return worker_documents([*active, *inactive[:INACTIVE_WORKERS_SHOWN]])


def _charts(deps: AdminDeps) -> str:
    history = deps.reads.controls.finished_per_minute(minutes=HISTORY_MINUTES)
    data = json.dumps(
        {
            "start": int(history[0].minute_at.timestamp()) // 60,
            "succeeded": [m.succeeded for m in history],
            "dead": [m.dead for m in history],
        }
    )
    return (
        f'<section class=charts id=charts data-history="{pages.e(data)}">'
        "<div><h3>Succeeded per minute (last hour)</h3>"
        "<canvas id=chart-throughput width=400 height=140></canvas></div>"
        "<div><h3>Dead per minute (last hour)</h3>"
        "<canvas id=chart-failures width=400 height=140></canvas></div>"
        "<div><h3>Queue depth (queued, live)</h3>"
        "<canvas id=chart-depth width=400 height=140></canvas></div></section>"
    )


@router.get("/dashboard")
def overview(request: Request) -> Response:
    """Queues, workers (active, stopped, dead), charts that start from the last hour's
    history, recent failures and coordination (schedules, workflows, locks, breakers)."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    stats = queue_stats(deps)
    workers = overview_workers(deps)
    active = sum(1 for w in workers if w["status"] in ("active", "running"))
    failures = [
        job_document(j)
        for state in (JobState.DEAD, JobState.FAILED)
        for j in deps.reads.client.list(state=state, limit=20)
    ]
    body = (
        _charts(deps)
        + "<h2>Queues</h2>"
        + pages.table(pages.QUEUE_HEADERS, pages.queue_rows(stats["queues"]), table_id="queues")
        + f"<h2>Workers <small id=worker-count>({active} active)</small></h2>"
        + pages.table(pages.WORKER_HEADERS, pages.worker_rows(workers), table_id="workers")
        + '<h2>Failures <small><a class=retry-dead href="/dashboard/retry-dead">'
        + "retry every dead job…</a></small></h2>"
        + pages.table(pages.JOB_HEADERS, pages.job_rows(failures), table_id="failures")
        + coordination_page.section(deps)
    )
    return render_page(request, "Overview", f'<div id=overview data-live="1">{body}</div>', caller)


@router.get("/dashboard/fragments/coordination")
def coordination_fragment(request: Request) -> Response:
    """The overview's Coordination section alone, which the page's script fetches every few
    seconds to keep it live (401 without a session: the script then stops)."""
    if session_caller(request) is None:
        raise HTTPException(401, "sign in again")
    deps: AdminDeps = request.app.state.deps
    return HTMLResponse(coordination_page.section(deps), headers={"Cache-Control": "no-store"})


@router.get("/dashboard/jobs")
def jobs_page(
    request: Request,
    state: Annotated[str | None, Query()] = None,
    queue: Annotated[str | None, Query(max_length=64)] = None,
    task: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    """Jobs filtered by state, queue and task, newest first."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    chosen = JobState(state) if state in pages.STATE_FILTERS else None
    wellformed = (not queue or re.match(schemas.QUEUE_PATTERN, queue)) and (
        not task or re.match(schemas.KEY_PATTERN, task)
    )
    found = (
        deps.reads.client.list(state=chosen, queue=queue or None, task=task or None, limit=200)
        if wellformed
        else []  # a filter no job can match (and no odd bytes sent to the database)
    )
    retry = ""
    if chosen is JobState.DEAD and found and wellformed:
        link = pages.retry_dead_link(queue, task)
        retry = f'<p><a class=retry-dead href="{pages.e(link)}">Retry the dead jobs of this'
        retry += " filter…</a> (shows how many first)</p>"
    body = (
        "<h2>Jobs</h2>"
        + pages.filter_form(state, queue, task)
        + retry
        + pages.table(
            pages.JOB_HEADERS, pages.job_rows([job_document(j) for j in found]), table_id="jobs"
        )
    )
    return render_page(request, "Jobs", body, caller)


@router.get("/dashboard/jobs/{job_id}")
def jobrender_page(request: Request, job_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> Response:
    """One job: arguments (secrets masked), attempts, error and traceback."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    document: dict[str, Any] = job_document(deps.client.get(job_id))
    items = None
    if deps.items is not None:
        progress = deps.items.item_progress(job_id)
        if progress.total is not None or progress.done > 0:
            items = progress.as_dict()
    return render_page(request, f"Job {job_id}", pages.job_detail(document, items), caller)
