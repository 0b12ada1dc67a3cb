"""The overview's Coordination section: schedules, recent workflows, held locks and circuit
breakers, read through the same ports as their HTTP endpoints and rendered with every value
escaped. An empty list is one "none" line, not an empty table. Schedules have pause and
resume buttons; workflows link to their pages."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from ledgerq.admin import pages
from ledgerq.admin.deps import AdminDeps
from ledgerq.core.limits import Circuit
from ledgerq.core.locks import LockRecord
from ledgerq.core.schedules import ScheduleOverview
from ledgerq.core.workflow import WorkflowView

#: How many of the newest workflows the overview lists (the API pages through the rest).
RECENT_WORKFLOWS = 10

SCHEDULE_HEADERS = ("schedule", "cron", "tz", "status", "next tick", "last run", "")
WORKFLOW_HEADERS = ("id", "name", "state", "steps")
LOCK_HEADERS = ("lock", "owner", "token", "age")
BREAKER_HEADERS = ("breaker", "state")


def listing(title: str, headers: Sequence[str], rows: Sequence[str], *, table_id: str) -> str:
    """A titled table, or a single "none" line when there are no rows."""
    if not rows:
        return f'<h3>{pages.e(title)}</h3><p class=empty id="{pages.e(table_id)}">none</p>'
    return f"<h3>{pages.e(title)}</h3>" + pages.table(headers, rows, table_id=table_id)


def _state(value: str) -> str:
    return f'<span class="state {pages.e(value)}">{pages.e(value)}</span>'


def schedule_rows(schedules: Sequence[ScheduleOverview]) -> list[str]:
    """One row per schedule; ``next tick`` is "-" until a scheduler has passed over it, and
    ``last run`` until its first tick fired."""
    rows = []
    for overview in schedules:
        state, run = overview.state, overview.last_run
        last = "-"
        if run is not None:
            fired = (
                f'<a href="/dashboard/jobs/{int(run.job_id)}">job {int(run.job_id)}</a>'
                if run.job_id is not None
                else "skipped"
            )
            last = f"{pages.e(run.tick)} · {fired}"
        rows.append(
            f'<tr data-schedule="{pages.e(state.schedule.name)}">'
            f"<td>{pages.e(state.schedule.name)}</td><td><code>{pages.e(state.schedule.cron)}"
            f"</code></td><td>{pages.e(state.schedule.tz)}</td>"
            f"<td>{'paused' if state.paused else 'active'}</td>"
            f"<td>{pages.e(state.next_tick) or '-'}</td><td>{last}</td>"
            f"<td>{_toggle(state.schedule.name, paused=state.paused)}</td></tr>"
        )
    return rows


def _toggle(name: str, *, paused: bool) -> str:
    """Pause or resume, through ``/admin/schedules/{name}/pause|resume`` (names may hold
    slashes, which that route takes as they are)."""
    path = f"/admin/schedules/{quote(name, safe='/')}"
    if paused:
        return pages.action("Resume", f"{path}/resume")
    return pages.action("Pause", f"{path}/pause", danger=True)


def workflow_link(workflow_id: str) -> str:
    """A link to the workflow's page."""
    href = f"/dashboard/workflows/{quote(workflow_id, safe='')}"
    return f'<a href="{pages.e(href)}">{pages.e(workflow_id)}</a>'


def workflow_rows(workflows: Sequence[WorkflowView]) -> list[str]:
    """One row per workflow (linked to its page) with its finished steps out of all."""
    return [
        f'<tr data-workflow="{pages.e(w.id)}"><td>{workflow_link(w.id)}</td>'
        f"<td>{pages.e(w.name)}</td>"
        f"<td>{_state(w.state.value)}</td>"
        f"<td class=num>{int(w.steps_done)}/{int(w.steps_total)}</td></tr>"
        for w in workflows
    ]


def lock_rows(locks: Sequence[LockRecord]) -> list[str]:
    """One row per lock on record; an expired one or one whose worker is gone says stale."""
    return [
        f"<tr><td>{pages.e(r.name)}</td><td>{pages.e(r.owner)}</td>"
        f"<td class=num>{int(r.token)}</td>"
        f"<td class=num>{r.age_seconds:.0f} s{' (stale)' if r.stale else ''}</td></tr>"
        for r in locks
    ]


def breaker_rows(circuits: Sequence[Circuit]) -> list[str]:
    """One row per circuit breaker."""
    return [
        f"<tr><td>{pages.e(c.name)}</td><td>{_state(c.state.value)}</td></tr>" for c in circuits
    ]


def section(deps: AdminDeps) -> str:
    """The whole section, read now (the page's script fetches it again every few seconds
    from ``/dashboard/fragments/coordination``)."""
    locks = deps.locks.list_locks() if deps.locks is not None else []
    circuits = deps.limits.list_breakers() if deps.limits is not None else []
    recent = deps.workflows.list(limit=RECENT_WORKFLOWS)
    return (
        "<section id=coordination><h2>Coordination</h2>"
        + listing(
            "Schedules",
            SCHEDULE_HEADERS,
            schedule_rows(deps.schedules.list_schedules()),
            table_id="schedules",
        )
        + listing("Workflows", WORKFLOW_HEADERS, workflow_rows(recent), table_id="workflows")
        + listing("Locks", LOCK_HEADERS, lock_rows(locks), table_id="locks")
        + listing("Circuit breakers", BREAKER_HEADERS, breaker_rows(circuits), table_id="breakers")
        + "</section>"
    )
