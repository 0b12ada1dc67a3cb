"""HTML of the dashboard: small server-rendered fragments, every value escaped."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from ledgerq.core.states import JobState

STATE_FILTERS = [s.value for s in JobState]


def e(value: Any) -> str:
    """Escape any value for HTML text or a quoted attribute."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return escape(value.strftime("%Y-%m-%d %H:%M:%S"))
    return escape(str(value), quote=True)


def layout(title: str, body: str, *, csrf: str = "", signed_in: bool = True) -> str:
    """A whole page: header with navigation, ``body``, and the script."""
    nav = (
        '<nav><a href="/dashboard">Overview</a> <a href="/dashboard/jobs">Jobs</a>'
        ' <a href="/dashboard/jobs?state=dead">Failures</a>'
        ' <a href="/dashboard/batches">Batches</a> <a href="/dashboard/workflows">Workflows</a>'
        ' <a href="/dashboard/failovers">Failovers</a>'
        ' <button class="link" data-action="/dashboard/logout" data-then="/dashboard/login">'
        "Sign out</button></nav>"
        if signed_in
        else ""
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f'<meta name=csrf-token content="{e(csrf)}"><title>{e(title)} · ledgerq</title>'
        '<link rel=stylesheet href="/dashboard/static/dashboard.css"></head><body>'
        f"<header><h1>ledgerq</h1>{nav}</header><main>{body}</main>"
        "<div id=toast role=status aria-live=polite></div>"
        '<script src="/dashboard/static/dashboard.js"></script></body></html>'
    )


def table(headers: Sequence[str], rows: Iterable[str], *, table_id: str = "") -> str:
    """A table with ``headers`` and pre-rendered ``<tr>`` rows."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    ident = f' id="{e(table_id)}"' if table_id else ""
    body = "".join(rows) or f'<tr><td colspan="{len(headers)}" class=empty>none</td></tr>'
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def action(label: str, path: str, *, danger: bool = False) -> str:
    """A button that POSTs to ``path`` (with the CSRF header) and reloads the page."""
    cls = "act danger" if danger else "act"
    return f'<button class="{cls}" data-action="{e(path)}">{e(label)}</button>'


def job_actions(job: dict[str, Any]) -> str:
    """Retry and cancel buttons, where the job's state allows them."""
    state = job["state"]
    out = []
    if state in ("failed", "dead", "cancelled"):
        out.append(action("Retry", f"/api/v1/jobs/{job['id']}/retry"))
    if state in ("held", "scheduled", "queued", "running", "failed"):
        out.append(action("Cancel", f"/api/v1/jobs/{job['id']}/cancel", danger=True))
    return " ".join(out)


def error_header(error: Mapping[str, Any]) -> str:
    """An error's one-line header, ``Type: message``. An exception's stored message already
    starts with its type (``runtime.outcomes`` writes ``"RuntimeError: boom"``), so the type is
    not repeated; an error without an exception (unknown task, timeout, lost worker) is named
    by its ``kind`` (``unknown task: ...``), never by an empty type."""
    message = str(error.get("message") or "")
    name = str(error.get("type") or "") or str(error.get("kind") or "").replace("_", " ")
    if not name or message == name or message.startswith(f"{name}:"):
        return message or name or "error"
    return f"{name}: {message}" if message else name


def progress_bar(done: int, total: int, *, label: str = "") -> str:
    """A ``<progress>`` bar of ``done`` of ``total`` with its numbers beside it (no inline
    style: the CSP allows only the served style sheet)."""
    shown = max(min(done, total), 0)
    text = f"{done} / {total}" + (f" {label}" if label else "")
    return (
        f'<span class=bar><progress value="{shown}" max="{max(total, 1)}">{shown}</progress>'
        f" <span class=bar-text>{e(text)}</span></span>"
    )


def failovers_link(worker_id: str) -> str:
    """The failover events of one worker (linked from a dead worker's row)."""
    return f"/dashboard/failovers?{urlencode({'worker': worker_id})}"


def retry_dead_link(queue: str | None = None, task: str | None = None) -> str:
    """The confirmation page of a bulk retry of the dead jobs of ``queue`` and ``task``
    (every given one must match; none: every dead job)."""
    given = {k: v for k, v in (("queue", queue), ("task", task)) if v}
    return "/dashboard/retry-dead" + (f"?{urlencode(given)}" if given else "")


def job_rows(jobs: Sequence[dict[str, Any]]) -> list[str]:
    """One row per job, with a link to its detail page."""
    rows = []
    for job in jobs:
        error = error_header(job["error"]) if job.get("error") else ""
        rows.append(
            f'<tr data-job-id="{job["id"]}"><td><a href="/dashboard/jobs/{job["id"]}">'
            f"{job['id']}</a></td><td>{e(job['queue'])}</td><td>{e(job['task'])}</td>"
            f'<td><span class="state {e(job["state"])}">{e(job["state"])}</span></td>'
            f"<td>{job['attempt']}/{job['max_attempts']}</td><td>{e(job['created_at'])}</td>"
            f"<td class=error>{e(error[:120])}</td><td>{job_actions(job)}</td></tr>"
        )
    return rows


JOB_HEADERS = ("id", "queue", "task", "state", "attempts", "created", "error", "")


def queue_rows(queues: Sequence[dict[str, Any]]) -> list[str]:
    """One row per queue with pause or resume."""
    rows = []
    for q in queues:
        name = q["name"]
        counts = q["counts"]
        toggle = (
            action("Resume", f"/admin/queues/{name}/resume")
            if q["paused"]
            else action("Pause", f"/admin/queues/{name}/pause", danger=True)
        )
        link = f"/dashboard/jobs?{urlencode({'queue': name})}"
        if counts.get("dead"):  # the bulk retry's first step: a count, then a confirmation
            toggle += f' <a class=retry-dead href="{e(retry_dead_link(name))}">Retry dead</a>'
        rows.append(
            f'<tr data-queue="{e(name)}"><td><a href="{e(link)}">'
            f"{e(name)}</a></td><td class=num>{q['queued']}</td><td class=num>{q['running']}</td>"
            f"<td class=num>{counts.get('failed', 0)}</td><td class=num>{counts.get('dead', 0)}"
            f"</td><td class=num>{counts.get('succeeded', 0)}</td>"
            f"<td class='num lifetime'>{lifetime_cell(q.get('lifetime'))}</td>"
            f'<td class="num rate">-</td><td class=num>{q["latency_seconds"]:.1f} s</td>'
            f"<td>{'paused' if q['paused'] else 'active'}</td><td>{toggle}</td></tr>"
        )
    return rows


def lifetime_cell(figures: dict[str, Any] | None) -> str:
    """A queue's lifetime figures as ``enqueued / succeeded / dead`` (retention-pruned jobs
    included)."""
    if not figures:
        return "-"
    return f"{figures['enqueued']} / {figures['succeeded']} / {figures['dead']}"


QUEUE_HEADERS = (
    "queue",
    "queued",
    "running",
    "failed",
    "dead",
    "succeeded",
    "since start: enqueued / succeeded / dead",
    "rate/s",
    "latency",
    "status",
    "",
)


def _failovers(worker: dict[str, Any]) -> str:
    """A dead worker's link to its failover events (what moved, when, how long it took)."""
    if worker["status"] != "dead":
        return ""
    return f' <a class=failovers href="{e(failovers_link(worker["worker_id"]))}">failovers</a>'


def worker_rows(workers: Sequence[dict[str, Any]]) -> list[str]:
    """One row per worker, active, stopped or dead (its status coloured; a dead one links to
    its failover events)."""
    return [
        f'<tr data-worker="{e(w["worker_id"])}" data-status="{e(w["status"])}">'
        f"<td>{e(w['worker_id'])}</td><td>{e(w.get('hostname'))}</td>"
        f'<td><span class="state {e(w["status"])}">{e(w["status"])}</span>{_failovers(w)}</td>'
        f"<td class=num>{w['running_jobs']}</td><td>{e(', '.join(w['queues']))}</td>"
        f"<td class=num>{e(w['heartbeat_age_seconds'])} s</td>"
        f"<td>{e(w.get('stopped_at')) or '-'}</td></tr>"
        for w in workers
    ]


WORKER_HEADERS = ("worker", "host", "status", "running jobs", "queues", "heartbeat age", "left")


def filter_form(state: str | None, queue: str | None, task: str | None) -> str:
    """The jobs page's filter (a GET form: filtering changes nothing)."""
    options = "".join(
        f'<option value="{s}"{" selected" if s == state else ""}>{s}</option>'
        for s in STATE_FILTERS
    )
    return (
        '<form class=filters method=get action="/dashboard/jobs">'
        f'<label>state <select name=state><option value="">any</option>{options}</select></label>'
        f'<label>queue <input name=queue value="{e(queue)}"></label>'
        f'<label>task <input name=task value="{e(task)}"></label>'
        "<button type=submit>Filter</button></form>"
    )


def _links(job: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows linking the job to its batch and workflow, where it belongs to one."""
    rows = []
    if job.get("batch_id") is not None:
        batch = int(job["batch_id"])
        rows.append(("batch", f'<a id=job-batch href="/dashboard/batches/{batch}">{batch}</a>'))
    if job.get("workflow_id"):
        link = f"/dashboard/workflows/{quote(str(job['workflow_id']), safe='')}"
        rows.append(
            ("workflow", f'<a id=job-workflow href="{e(link)}">{e(job["workflow_id"])}</a>')
        )
    return rows


def items_row(items: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The row of a job's item progress (``ctx.items()``), if it has items."""
    if not items:
        return []
    done, total = int(items["done"]), items.get("total")
    if total is None:
        return [("items", f"<span id=job-items>{done} done</span>")]
    rate = items.get("rate_per_second")
    label = f"({rate:.1f}/s)" if isinstance(rate, int | float) and rate else ""
    return [("items", f"<span id=job-items>{progress_bar(done, int(total), label=label)}</span>")]


def job_detail(job: dict[str, Any], items: Mapping[str, Any] | None = None) -> str:
    """Every field of one job (arguments already masked), its item progress and links to
    its batch and workflow."""
    fields = [
        ("state", f'<span class="state {e(job["state"])}" id=job-state>{e(job["state"])}</span>'),
        ("queue", e(job["queue"])),
        ("task", e(job["task"])),
        ("attempt", f"{job['attempt']} of {job['max_attempts']}"),
        *_links(job),
        *items_row(items),
        ("priority", e(job["priority"])),
        ("worker", e(job["worker_id"])),
        ("dedupe key", e(job["dedupe_key"])),
        ("created", e(job["created_at"])),
        ("run at", e(job["run_at"])),
        ("claimed", e(job.get("claimed_at"))),
        ("started", e(job["started_at"]) if job["started_at"] else "waiting to start"),
        ("heartbeat", e(job["heartbeat_at"])),
        ("finished", e(job["finished_at"])),
    ]
    rows = "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in fields)
    arguments = json.dumps({"args": job["args"], "kwargs": job["kwargs"]}, indent=2)
    error = job.get("error")
    # The error's header goes on top, where a person looks first; its traceback below.
    header = f"<p class=error id=job-error>{e(error_header(error))}</p>" if error else ""
    parts = [
        f"<h2>Job {job['id']}</h2>{header}<p>{job_actions(job)}</p>",
        f"<table class=detail>{rows}</table>",
        f"<h3>Arguments</h3><pre>{e(arguments)}</pre>",
    ]
    if job["result"] is not None:
        parts.append(f"<h3>Result</h3><pre>{e(json.dumps(job['result'], indent=2))}</pre>")
    if error and error.get("traceback"):
        parts.append(f"<h3>Traceback</h3><pre class=traceback>{e(error['traceback'])}</pre>")
    return "".join(parts)


def login_page(message: str = "") -> str:
    """The sign-in form: the token is exchanged for a session cookie."""
    note = f"<p class=error>{e(message)}</p>" if message else ""
    body = (
        "<h2>Sign in</h2>" + note + '<form method=post action="/dashboard/login" class=login>'
        "<label>API token <input type=password name=token autocomplete=current-password"
        " required autofocus></label><button type=submit>Sign in</button></form>"
    )
    return layout("Sign in", body, signed_in=False)
