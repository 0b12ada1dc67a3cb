"""The pure domain: transitions, retry policy, payload codec and request validation."""

from __future__ import annotations

import random

import pytest

from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.job import check_delay, check_queue_name
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.states import FINISHED, TRANSITIONS, JobState, check_transition, sources_of

S = JobState


def test_every_state_has_a_transition_entry_and_finished_states_do_not_run() -> None:
    assert set(TRANSITIONS) == set(JobState)
    for state in FINISHED:
        assert S.RUNNING not in TRANSITIONS[state]
    assert sources_of(S.RUNNING) == {S.QUEUED}


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        (S.QUEUED, S.RUNNING, True),
        (S.RUNNING, S.SUCCEEDED, True),
        (S.RUNNING, S.QUEUED, True),
        (S.SUCCEEDED, S.QUEUED, False),
        (S.HELD, S.RUNNING, False),
        (S.DEAD, S.QUEUED, True),
    ],
)
def test_check_transition(source: JobState, target: JobState, allowed: bool) -> None:
    if allowed:
        check_transition(source, target)
    else:
        with pytest.raises(errors.InvalidTransition):
            check_transition(source, target)


def test_backoff_doubles_within_jitter_and_is_capped() -> None:
    policy = RetryPolicy(max_attempts=10, base_seconds=2.0, cap_seconds=30.0, jitter=0.25)
    rng = random.Random(7)
    for attempt, nominal in [(1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 30.0), (50, 30.0)]:
        samples = [policy.delay_seconds(attempt, rng) for _ in range(200)]
        assert min(samples) >= nominal * 0.75 and max(samples) <= nominal * 1.25
        assert max(samples) - min(samples) > 0  # jitter spreads retries out


def test_retry_stops_at_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert [policy.should_retry(a) for a in (1, 2, 3, 4)] == [True, True, False, False]


@pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"base_seconds": -1}, {"jitter": 1.5}])
def test_retry_policy_rejects_nonsense(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)  # type: ignore[arg-type]


def test_codec_round_trips_and_caps_size_and_depth() -> None:
    codec = PayloadCodec(max_bytes=100, max_depth=4)
    text = codec.encode_args((1, "ü"), {"k": [1, 2]})
    assert codec.decode_args(text) == ([1, "ü"], {"k": [1, 2]})
    with pytest.raises(errors.PayloadError, match="exceeds the cap"):
        codec.encode("x" * 200)
    with pytest.raises(errors.PayloadError, match="deeper"):
        codec.encode([[[[["too deep"]]]]])
    with pytest.raises(errors.PayloadError, match="JSON"):
        codec.encode({"when": object()})
    with pytest.raises(errors.PayloadError, match="JSON"):
        codec.encode(float("nan"))


def test_hostile_nesting_is_refused_without_recursion_error() -> None:
    value: list[object] = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(errors.PayloadError):
        PayloadCodec().encode(value)


@pytest.mark.parametrize("name", ["", "bad queue", "x" * 65, "-lead", "q/1", "ü", "q\n"])
def test_invalid_queue_names_are_refused(name: str) -> None:
    with pytest.raises(errors.InvalidQueueName):
        check_queue_name(name)


@pytest.mark.parametrize("name", ["default", "sms.high", "tenant:42", "a_b-c"])
def test_valid_queue_names(name: str) -> None:
    assert check_queue_name(name) == name


@pytest.mark.parametrize("delay", [-1, float("nan"), 400 * 86400, "5"])
def test_bad_delays_are_refused(delay: object) -> None:
    with pytest.raises(errors.InvalidSchedule):
        check_delay(delay)  # type: ignore[arg-type]


def test_error_tree_has_one_root() -> None:
    leaves = [
        errors.PayloadError,
        errors.InvalidQueueName,
        errors.StaleClaim,
        errors.JobNotFound,
        errors.TaskNotRegistered,
        errors.ConfigError,
        errors.StoreUnavailable,
    ]
    assert all(issubclass(leaf, errors.LedgerqError) for leaf in leaves)


def test_unknown_task_policy_delays_grow_and_burial_waits_for_the_grace() -> None:
    from ledgerq.core.unknown_tasks import UnknownTaskPolicy

    policy = UnknownTaskPolicy(grace_seconds=300, first_delay_seconds=1, max_delay_seconds=30)
    assert [policy.delay_seconds(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert policy.delay_seconds(10**6) == 30  # no overflow however long it waits
    assert policy.delay_seconds(5, declared=True) == 1  # its worker should have it soon
    assert not policy.buries(declared=False, waited_seconds=299.9)
    assert policy.buries(declared=False, waited_seconds=300)
    assert not policy.buries(declared=True, waited_seconds=10**6)
    assert UnknownTaskPolicy(grace_seconds=0).buries(declared=False, waited_seconds=0)


def test_names_with_a_trailing_newline_are_refused() -> None:
    """``$`` in a pattern matches before a final newline: names are matched whole."""
    from ledgerq.core.schedules import InvalidScheduleDefinition, check_schedule_name

    with pytest.raises(InvalidScheduleDefinition):
        check_schedule_name("nightly\n")
    assert check_schedule_name("nightly") == "nightly"
