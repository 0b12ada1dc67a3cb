"""Cron arithmetic: DST gaps and repeats, seconds fields, missed-tick policies, bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from itertools import islice

import pytest

from ledgerq import LedgerQ
from ledgerq.core import errors
from ledgerq.core.schedules import MissedPolicy, Schedule
from ledgerq.runtime import cron


def at(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def schedule(expression: str, tz: str = "UTC", **kw: object) -> Schedule:
    return Schedule(name="s", cron=expression, task="t", tz=tz, **kw)  # type: ignore[arg-type]


def first(s: Schedule, after: datetime, n: int) -> list[datetime]:
    return list(islice(cron.ticks_after(s, after), n))


def test_a_daily_time_in_the_spring_forward_gap_fires_once_at_the_end_of_the_gap() -> None:
    # Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist.
    daily = schedule("30 2 * * *", "Europe/Berlin")
    ticks = first(daily, at(2026, 3, 27), 4)
    assert ticks == [
        at(2026, 3, 27, 1, 30),  # 02:30 CET
        at(2026, 3, 28, 1, 30),
        at(2026, 3, 29, 1, 0),  # the gap: 03:00 CEST, the first valid time after it
        at(2026, 3, 30, 0, 30),  # 02:30 CEST
    ]


def test_a_daily_time_repeated_by_fall_back_fires_once_at_its_first_occurrence() -> None:
    # Europe/Berlin, 2026-10-25: 03:00 CEST goes back to 02:00 CET, so 02:30 happens twice.
    daily = schedule("30 2 * * *", "Europe/Berlin")
    ticks = first(daily, at(2026, 10, 24, 12), 2)
    assert ticks == [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]
    # Seen from inside the repeated hour (after the first 02:30), it does not fire again.
    assert first(daily, at(2026, 10, 25, 1, 15), 1) == [at(2026, 10, 26, 1, 30)]


def test_an_interval_schedule_never_repeats_or_reorders_ticks_across_transitions() -> None:
    every_20 = schedule("*/20 * * * *", "Europe/Berlin")
    for start in (at(2026, 3, 28, 23), at(2026, 10, 24, 23)):
        ticks = first(every_20, start, 30)
        assert ticks == sorted(set(ticks))


def test_ticks_before_finds_the_latest_ticks_including_one_at_the_bound() -> None:
    hourly = schedule("0 * * * *")
    assert cron.ticks_before(hourly, at(2026, 1, 1, 12), 3) == [
        at(2026, 1, 1, 10),
        at(2026, 1, 1, 11),
        at(2026, 1, 1, 12),
    ]


def test_six_fields_put_seconds_first() -> None:
    every_second = schedule("* * * * * *")
    assert first(every_second, at(2026, 1, 1, 0, 0, 0) + timedelta(milliseconds=400), 3) == [
        at(2026, 1, 1, 0, 0, 1),
        at(2026, 1, 1, 0, 0, 2),
        at(2026, 1, 1, 0, 0, 3),
    ]
    every_fifteen = schedule("*/15 * * * * *")
    assert first(every_fifteen, at(2026, 1, 1), 2) == [
        at(2026, 1, 1, 0, 0, 15),
        at(2026, 1, 1, 0, 0, 30),
    ]


NOW = at(2026, 1, 1, 12, 0, 0)


@pytest.mark.parametrize(
    ("missed", "expected_missed"),
    [
        (MissedPolicy.SKIP, []),
        (MissedPolicy.ONCE, [30]),
        (MissedPolicy.ALL, [50, 40, 30]),
    ],
)
def test_missed_ticks_follow_the_policy_and_on_time_ones_all_fire(
    missed: MissedPolicy, expected_missed: list[int]
) -> None:
    # Every 10 s; the last tick handled was at 10:00, two hours ago. With 30 s of grace the
    # ticks of the last 30 s are on time; everything older was missed.
    every_10 = schedule("*/10 * * * * *", missed=missed, max_catchup=3)
    plan = cron.plan_ticks(every_10, last_tick=at(2026, 1, 1, 10), now=NOW, grace_seconds=30)
    # Missed: ticks up to the grace window's start (11:59:30), the latest first to be kept.
    assert list(plan.fire) == [NOW - timedelta(seconds=s) for s in [*expected_missed, 20, 10, 0]]
    assert plan.last_tick == NOW
    assert plan.next_tick == NOW + timedelta(seconds=10)


def test_late_ticks_within_grace_all_fire_whatever_the_policy() -> None:
    every_second = schedule("* * * * * *", missed=MissedPolicy.SKIP)
    plan = cron.plan_ticks(
        every_second, last_tick=NOW - timedelta(seconds=5), now=NOW, grace_seconds=60
    )
    assert list(plan.fire) == [NOW - timedelta(seconds=s) for s in (4, 3, 2, 1, 0)]


def test_a_new_schedule_starts_from_now_without_firing() -> None:
    plan = cron.plan_ticks(schedule("* * * * *"), last_tick=None, now=NOW, grace_seconds=60)
    assert plan.fire == ()
    assert (plan.last_tick, plan.next_tick) == (NOW, NOW + timedelta(minutes=1))


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("* * *", "expected 5 fields"),
        ("61 * * * *", "invalid cron expression"),
        ("every minute please", "invalid cron expression"),
        ("0 0 30 2 *", "never fires"),
    ],
)
def test_invalid_cron_expressions_are_rejected_at_registration(
    expression: str, problem: str
) -> None:
    app = LedgerQ(database_url="sqlite://")
    with pytest.raises(errors.ConfigError, match=problem):

        @app.periodic(cron=expression)
        def job(ctx: object) -> None: ...

    assert app.schedules == {}


def test_unknown_zones_and_policies_are_rejected_at_registration() -> None:
    app = LedgerQ(database_url="sqlite://")
    with pytest.raises(errors.ConfigError, match="unknown time zone 'Mars/Olympus'"):
        app.periodic(cron="* * * * *", tz="Mars/Olympus")(lambda ctx: None)
    with pytest.raises(errors.ConfigError, match="missed must be skip, once or all"):
        app.periodic(cron="* * * * *", missed="twice")(lambda ctx: None)
    with pytest.raises(errors.ConfigError, match="max_catchup"):
        app.periodic(cron="* * * * *", missed="all", max_catchup=0)(lambda ctx: None)
    with pytest.raises(errors.ConfigError, match="periodic task arguments"):
        app.periodic(cron="* * * * *", args=(object(),))
    assert app.schedules == {} and len(app.registry) == 0


def test_periodic_declares_a_schedule_for_a_new_or_an_existing_task() -> None:
    app = LedgerQ(database_url="sqlite://")

    @app.periodic(cron="0 3 * * *", tz="Europe/Berlin", args=(7,), missed="once")
    @app.task(name="nightly", queue="reports")
    def nightly(ctx: object, n: int) -> int:
        return n

    @app.periodic(cron="*/5 * * * * *", name="pulse", overlap="skip")
    def pulse(ctx: object) -> None: ...

    assert nightly.name == "nightly" and "pulse" not in app.registry
    declared = app.schedules
    assert declared["nightly"].task == "nightly"
    assert json.loads(declared["nightly"].args_json) == {"args": [7], "kwargs": {}}
    assert declared["nightly"].missed is MissedPolicy.ONCE
    assert declared["pulse"].task == pulse.name and declared["pulse"].overlap.value == "skip"
    with pytest.raises(errors.ConfigError, match="declared twice"):
        app.periodic(cron="* * * * *", name="pulse")(nightly)
