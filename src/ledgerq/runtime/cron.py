"""Cron arithmetic over croniter: which UTC instants are a schedule's ticks, and which of the
due ones to fire under its missed-tick policy. Pure functions of (schedule, now).

Ticks are computed on the schedule's wall clock and stored as UTC. Daylight saving time:

- a wall-clock time skipped by a spring-forward gap fires once, at the first valid time after
  the gap (``30 2 * * *`` in Europe/Berlin on the last Sunday of March fires at 03:00 CEST);
- a wall-clock time repeated by a fall-back fires once, at its first occurrence (CEST);

so the local-to-UTC mapping never goes backwards and a tick never fires twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from ledgerq.core import errors
from ledgerq.core.job import check_queue_name
from ledgerq.core.schedules import (
    InvalidScheduleDefinition,
    MissedPolicy,
    OverlapPolicy,
    Schedule,
    ScheduleSource,
)

#: More than the largest repeated stretch of wall-clock time in any zone (a fall-back).
_SLACK = timedelta(hours=3)


def check_cron(expression: str) -> str:
    """Return ``expression`` if croniter accepts it (5 fields, or 6 with seconds first), else
    raise ``InvalidScheduleDefinition`` naming the problem."""
    fields = expression.split() if isinstance(expression, str) else []
    if len(fields) not in (5, 6):
        raise InvalidScheduleDefinition(
            f"invalid cron expression {expression!r}: expected 5 fields (minute hour day month"
            " weekday) or 6 with seconds first",
            field="cron",
        )
    try:
        croniter(_ordered(expression), datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise InvalidScheduleDefinition(
            f"cron expression {expression!r} never fires", field="cron"
        ) from None
    except (CroniterError, ValueError, KeyError) as exc:
        raise InvalidScheduleDefinition(
            f"invalid cron expression {expression!r}: {exc}", field="cron"
        ) from None
    return expression


def check_timezone(name: str) -> ZoneInfo:
    """Return the zone ``name`` (IANA, e.g. ``Europe/Berlin``), else raise
    ``InvalidScheduleDefinition``."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise InvalidScheduleDefinition(
            f"unknown time zone {name!r}: use an IANA name", field="tz"
        ) from None


def check_schedule(schedule: Schedule) -> Schedule:
    """Return ``schedule`` if its cron expression and time zone are valid."""
    check_cron(schedule.cron)
    check_timezone(schedule.tz)
    return schedule


def _ordered(expression: str) -> str:
    # We take seconds first (as Quartz and APScheduler do); croniter wants them last.
    fields = expression.split()
    return " ".join([*fields[1:], fields[0]]) if len(fields) == 6 else expression


def to_utc(local: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of naive wall-clock time ``local`` in ``zone``: a repeated time maps to
    its first occurrence, a skipped time to the end of its gap."""
    first = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == local:
        return first
    # In a gap: fold=1 reads it with the later offset, landing before the transition.
    low = int(local.replace(tzinfo=zone, fold=1).astimezone(UTC).timestamp())
    high = int(first.timestamp())
    while high - low > 1:  # the transition is the first second with the later offset
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == first.astimezone(zone).utcoffset():
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def ticks_after(schedule: Schedule, after: datetime) -> Iterator[datetime]:
    """The schedule's ticks later than ``after`` (aware), ascending and unique, as UTC.

    ``to_utc`` never goes backwards and maps the wall-clock time of ``after`` to ``after`` or
    earlier, so no tick later than ``after`` lies at or before that wall-clock time."""
    zone = check_timezone(schedule.tz)
    local_ticks = croniter(_ordered(schedule.cron), after.astimezone(zone).replace(tzinfo=None))
    previous: datetime | None = None
    while True:
        tick = to_utc(local_ticks.get_next(datetime), zone)
        if tick > after and tick != previous:
            previous = tick
            yield tick


def ticks_before(schedule: Schedule, before: datetime, limit: int) -> list[datetime]:
    """Up to ``limit`` of the schedule's latest ticks at or before ``before``, ascending."""
    zone = check_timezone(schedule.tz)
    local = before.astimezone(zone)
    # In the second pass of a repeated hour, later wall-clock times still map (to their
    # first pass) before ``before``; 1 µs so a tick exactly at ``before`` is included.
    start = local.replace(tzinfo=None) + (_SLACK if local.fold else timedelta(microseconds=1))
    local_ticks = croniter(_ordered(schedule.cron), start)
    found: list[datetime] = []
    while len(found) < limit:
        tick = to_utc(local_ticks.get_prev(datetime), zone)
        if tick <= before and (not found or tick != found[-1]):
            found.append(tick)
    return found[::-1]


def next_tick(schedule: Schedule, after: datetime) -> datetime:
    """The first tick later than ``after``."""
    return next(ticks_after(schedule, after))


@dataclass(frozen=True, slots=True)
class TickPlan:
    """What one scheduler pass does for a schedule: fire ``fire`` in order, then record
    progress up to ``last_tick``; ``next_tick`` is the first tick after that."""

    fire: tuple[datetime, ...]
    last_tick: datetime
    next_tick: datetime


def plan_ticks(
    schedule: Schedule, *, last_tick: datetime | None, now: datetime, grace_seconds: float
) -> TickPlan:
    """Due ticks are those after ``last_tick`` up to ``now``. Ticks at most ``grace_seconds``
    old are on time and all fire; older ones were missed and follow ``schedule.missed``.
    Without ``last_tick`` (new or resumed schedule) nothing is due yet."""
    following = next_tick(schedule, now)
    if last_tick is None or last_tick >= now:
        return TickPlan((), max(now, last_tick or now), following)
    cutoff = now - timedelta(seconds=grace_seconds)
    on_time: list[datetime] = []
    for tick in ticks_after(schedule, max(last_tick, cutoff)):
        if tick > now:
            break
        on_time.append(tick)
    missed: list[datetime] = []
    if last_tick < cutoff and schedule.missed is not MissedPolicy.SKIP:
        keep = schedule.max_catchup if schedule.missed is MissedPolicy.ALL else 1
        missed = [t for t in ticks_before(schedule, cutoff, keep) if t > last_tick]
    return TickPlan((*missed, *on_time), now, following)


def build_schedule(
    name: str,
    *,
    cron_expression: str,
    task: str,
    args_json: str,
    tz: str = "UTC",
    queue: str | None = None,
    missed: str = "skip",
    max_catchup: int = 10,
    overlap: str = "allow",
    source: ScheduleSource = ScheduleSource.CODE,
) -> Schedule:
    """A validated Schedule from user input; raise ``InvalidScheduleDefinition`` naming the
    first problem (cron expression, time zone, policy names, queue name, ``max_catchup``)."""
    try:
        missed_policy = MissedPolicy(missed)
    except ValueError:
        raise InvalidScheduleDefinition(
            f"missed must be skip, once or all, got {missed!r}", field="missed"
        ) from None
    try:
        overlap_policy = OverlapPolicy(overlap)
    except ValueError:
        raise InvalidScheduleDefinition(
            f"overlap must be skip or allow, got {overlap!r}", field="overlap"
        ) from None
    if queue is not None:
        try:
            check_queue_name(queue)
        except errors.InvalidQueueName as exc:
            raise InvalidScheduleDefinition(str(exc), field="queue") from None
    return check_schedule(
        Schedule(
            name=name,
            cron=cron_expression,
            task=task,
            args_json=args_json,
            tz=tz,
            queue=queue,
            missed=missed_policy,
            max_catchup=max_catchup,
            overlap=overlap_policy,
            source=source,
        )
    )
