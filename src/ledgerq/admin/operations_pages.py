"""The dashboard's pages over ``operations_api``: the failover record (which worker died, who
noticed, the jobs moved with links to them, the time it took) and the bulk retry of dead
jobs, whose confirmation step shows the dry run's count before anything moves. Reads go
through the same ports as the endpoints; the retry button posts to the endpoint itself."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ledgerq.admin import pages, schemas
from ledgerq.admin.dashboard import render_page, session_caller, to_login
from ledgerq.admin.deps import AdminDeps
from ledgerq.core.requeue import DeadJobFilter, RequeueReport

router = APIRouter(include_in_schema=False)

#: Failover events the page lists (the newest).
EVENTS_SHOWN = 200
#: Job links shown per kind in one event's row; the rest are counted.
JOBS_LINKED = 12

FAILOVER_HEADERS = (
    "detected",
    "dead worker",
    "detected by",
    "last heartbeat",
    "requeued",
    "buried",
    "took",
)

WorkerFilter = Annotated[str | None, Query(max_length=128)]
QueueFilter = Annotated[str | None, Query(max_length=64, pattern=schemas.QUEUE_PATTERN)]
TaskFilter = Annotated[str | None, Query(max_length=200, pattern=schemas.KEY_PATTERN)]


def job_links(ids: Sequence[int], *, kind: str) -> str:
    """How many jobs, then links to the first ``JOBS_LINKED`` of them."""
    if not ids:
        return "0"
    links = " ".join(
        f'<a class=job-link data-kind="{kind}" href="/dashboard/jobs/{int(i)}">#{int(i)}</a>'
        for i in ids[:JOBS_LINKED]
    )
    more = f" +{len(ids) - JOBS_LINKED} more" if len(ids) > JOBS_LINKED else ""
    return f"<b>{len(ids)}</b> job{'s' if len(ids) > 1 else ''}: {links}{more}"


def failover_rows(events: Sequence[Mapping[str, Any]]) -> list[str]:
    """One row per failover event, newest first."""
    rows = []
    for event in events:
        moved = event.get("job_ids") or {}
        worker = str(event["worker_id"])
        rows.append(
            f'<tr data-event-id="{int(event["id"])}" data-worker="{pages.e(worker)}">'
            f"<td>{pages.e(event['detected_at'])}</td>"
            f'<td><a href="{pages.e(pages.failovers_link(worker))}">{pages.e(worker)}</a></td>'
            f"<td>{pages.e(event['detected_by'])}</td>"
            f"<td>{pages.e(event.get('last_heartbeat_at')) or '-'}</td>"
            f"<td>{job_links(moved.get('requeued', []), kind='requeued')}</td>"
            f"<td>{job_links(moved.get('dead', []), kind='dead')}</td>"
            f"<td class=num>{float(event['duration_ms']):.1f} ms</td></tr>"
        )
    return rows


@router.get("/dashboard/failovers")
def failovers_page(request: Request, worker: WorkerFilter = None) -> Response:
    """The failover record, newest first; ``worker`` keeps one worker's events."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    if deps.failovers is None:
        body = "<h2>Failovers</h2><p class=empty>The failover record is not available here.</p>"
        return render_page(request, "Failovers", body, caller)
    events = deps.failovers.list_failover_events(limit=EVENTS_SHOWN, worker_id=worker or None)
    scope = (
        f' <small>of {pages.e(worker)} · <a href="/dashboard/failovers">all workers</a></small>'
        if worker
        else f" <small>(the {EVENTS_SHOWN} newest)</small>"
    )
    body = (
        f"<h2>Failovers{scope}</h2>"
        "<p class=note>A worker whose heartbeat stopped is declared dead; its running jobs go"
        " back to the queue, or are buried when their attempts are spent.</p>"
        + pages.table(FAILOVER_HEADERS, failover_rows(events), table_id="failovers")
    )
    return render_page(request, "Failovers", body, caller)


def _count_rows(report: RequeueReport) -> list[str]:
    return [
        f'<tr data-queue="{pages.e(q)}" data-task="{pages.e(t)}"><td>{pages.e(q)}</td>'
        f"<td>{pages.e(t)}</td><td class=num>{n}</td></tr>"
        for (q, t), n in sorted(report.counts.items())
    ]


def _confirm(report: RequeueReport, queue: str | None, task: str | None) -> str:
    """The button that runs the retry, with the filter the dry run counted."""
    if not report.total:
        return "<p id=retry-dead-none>No dead job matches: nothing to retry.</p>"
    body = json.dumps({k: v for k, v in (("queue", queue), ("task", task)) if v})
    after = f"/dashboard/jobs?{urlencode({'state': 'queued', 'queue': queue or ''})}"
    return (
        f'<p id=retry-dead-confirm><button class="act" id=retry-dead-run'
        f' data-action="/admin/queue/requeue-failed" data-body="{pages.e(body)}"'
        f' data-report="retry-dead-result" data-template="{{total}} dead job(s) queued again.">'
        f"Retry {report.total} dead job(s)</button>"
        ' <a href="/dashboard">Cancel</a></p>'
        f'<p id=retry-dead-result class=note hidden>Done. <a href="{pages.e(after)}">'
        "See them queued</a>.</p>"
    )


@router.get("/dashboard/retry-dead")
def retry_dead_page(
    request: Request, queue: QueueFilter = None, task: TaskFilter = None
) -> Response:
    """Step one of a bulk retry: how many dead jobs of ``queue`` and ``task`` a retry would
    queue again (a dry run: nothing moves), with the button that does it. Jobs that die
    between this count and the click are retried too; the result says how many moved."""
    caller = session_caller(request)
    if caller is None:
        return to_login()
    deps: AdminDeps = request.app.state.deps
    which = DeadJobFilter(queue=queue or None, task=task or None)
    report = deps.client.retry_dead(which, dry_run=True)
    scope = ", ".join(f"{k} {v}" for k, v in (("queue", queue), ("task", task)) if v)
    body = (
        f"<h2>Retry dead jobs <small>{pages.e(scope or 'every queue and task')}</small></h2>"
        f"<p id=retry-dead-count>{report.total} dead job(s) match. Retrying queues each"
        " again, due now, for one more run (as a single retry does).</p>"
        "<p class=note>Dead workflow steps are not counted: retry them from their workflow's"
        ' page, which reopens the workflow (<a href="/dashboard/workflows">Workflows</a>).</p>'
        + pages.table(
            ("queue", "task", "dead jobs"), _count_rows(report), table_id="retry-dead-counts"
        )
        + _confirm(report, queue, task)
    )
    return render_page(request, "Retry dead jobs", body, caller)
