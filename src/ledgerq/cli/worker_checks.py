"""What a worker says as it starts: a banner (version, database with its password masked,
driver, queues, concurrency, task count) and one warning per registered task or active
schedule (declared in code or added at runtime) whose queue no worker consumes, counting
this worker's queues and those of the live workers in the fleet registry.
``worker validate-config`` reports the same work."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import structlog

import ledgerq
from ledgerq.app import wiring
from ledgerq.core import errors
from ledgerq.core.redaction import mask_url
from ledgerq.core.schedules import Schedule
from ledgerq.core.unserved import UnservedWork, find_unserved

if TYPE_CHECKING:
    from ledgerq.app.application import LedgerQ

log = structlog.get_logger("ledgerq.worker")


def consumed_queues(app: LedgerQ, own: Iterable[str]) -> set[str]:
    """``own`` plus the queues of every active worker in the fleet registry. A registry that
    cannot be read (database down) counts as empty: the check is advice, never a reason not
    to start, and the worker itself waits for the database."""
    consumed = set(own)
    try:
        workers = app.parts.fleet.list_workers()
    except errors.LedgerqError as exc:
        log.debug("could not read the fleet registry for the queue check", error=str(exc))
        return consumed
    for worker in workers:
        consumed.update(worker.queues)
    return consumed


def unserved_work(app: LedgerQ, own_queues: Iterable[str]) -> list[UnservedWork]:
    """The application's tasks and schedules whose queue neither ``own_queues`` nor any live
    worker consumes."""
    consumed = consumed_queues(app, own_queues)
    return find_unserved(app.registry, active_schedules(app), consumed)


def active_schedules(app: LedgerQ) -> list[Schedule]:
    """The schedules that fire: those declared in code, and those in the ledger (added at
    runtime with ``schedule add``, or stored by a scheduler), less the paused ones. A ledger
    that cannot be read counts only the code's."""
    by_name = {schedule.name: schedule for schedule in app.schedules.values()}
    try:
        stored = wiring.schedule_store(app.parts).list_schedules()
    except errors.LedgerqError as exc:
        log.debug("could not read the stored schedules for the queue check", error=str(exc))
        return list(by_name.values())
    for state in stored:
        if state.paused:
            by_name.pop(state.schedule.name, None)
        else:
            by_name[state.schedule.name] = state.schedule
    return list(by_name.values())


def database_shown(app: LedgerQ) -> str:
    """The database URL with its password masked, fit for a log line."""
    return mask_url(app.settings.database_url.get_secret_value())


def announce_start(app: LedgerQ, *, driver: str, queues: Sequence[str], concurrency: int) -> None:
    """Log the banner of a worker of ``app`` run with these options, then a warning for each
    task or schedule nobody will run."""
    from ledgerq.app.wiring import resolve_driver

    log.info(
        "ledgerq worker",
        version=ledgerq.__version__,
        database=database_shown(app),
        driver=resolve_driver(app.settings, driver),  # type: ignore[arg-type]  # click checked
        queues=list(queues),
        concurrency=concurrency,
        tasks=len(app.registry),
        schedules=len(app.schedules),
    )
    for work in unserved_work(app, queues):
        log.warning(f"{work.describe()}: its jobs will wait", **work.as_dict())
