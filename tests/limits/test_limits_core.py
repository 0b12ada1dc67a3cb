"""Pure limit policy: rate strings, task options and the circuit breaker's state machine."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ledgerq.core import errors
from ledgerq.core import limits as lim

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BREAKER = lim.Breaker(failures=3, reset_after=30)


@pytest.mark.parametrize(
    ("text", "limit", "period"),
    [
        ("100/s", 100, 1.0),
        ("20/m", 20, 60.0),
        ("1000/h", 1000, 3600.0),
        (" 5 / 10s ", 5, 10.0),
        ("7/min", 7, 60.0),
        ("1/HOUR", 1, 3600.0),
    ],
)
def test_rate_strings_parse(text: str, limit: int, period: float) -> None:
    assert lim.Rate.parse(text) == lim.Rate(limit, period)


@pytest.mark.parametrize("text", ["", "100", "0/s", "10/d", "ten/s", "-1/s", "10/0s", "1.5/s"])
def test_bad_rate_strings_are_config_errors(text: str) -> None:
    with pytest.raises(errors.ConfigError, match="rate limit"):
        lim.Rate.parse(text)


def test_task_limit_options_are_checked() -> None:
    assert (
        lim.TaskLimits.build(
            rate_limit=None,
            rate_key=None,
            concurrency_limit=None,
            concurrency_key=None,
            breaker=None,
        )
        is None
    )
    for bad in (
        {"rate_limit": None, "rate_key": str},
        {"concurrency_limit": 0},
        {"concurrency_limit": True},
        {"concurrency_limit": None, "concurrency_key": str},
        {"rate_limit": "5/x"},
        {"breaker": "yes"},
    ):
        options = {
            "rate_limit": None,
            "rate_key": None,
            "concurrency_limit": None,
            "concurrency_key": None,
            "breaker": None,
            **bad,
        }
        with pytest.raises(errors.ConfigError):
            lim.TaskLimits.build(**options)  # type: ignore[arg-type]
    with pytest.raises(errors.ConfigError):
        lim.Breaker(failures=0)
    with pytest.raises(errors.ConfigError):
        lim.Breaker(reset_after=0)


def test_limit_names_use_the_key_of_the_arguments() -> None:
    assert lim.limit_name("rate", "sms", None, (1,), {}) == "rate:sms"
    key = lambda message_id, provider: provider  # noqa: E731
    assert lim.limit_name("rate", "sms", key, (1,), {"provider": "twilio"}) == "rate:sms[twilio]"
    with pytest.raises(ValueError, match="key function"):
        lim.limit_name("rate", "sms", key, (), {})


def test_breaker_opens_after_a_run_of_failures_and_a_success_clears_the_count() -> None:
    circuit = lim.Circuit("b")
    circuit = lim.record(circuit, BREAKER, succeeded=False, now=T0)
    circuit = lim.record(circuit, BREAKER, succeeded=False, now=T0)
    assert (circuit.state, circuit.failures) == (lim.CircuitState.CLOSED, 2)
    assert lim.record(circuit, BREAKER, succeeded=True, now=T0) == lim.Circuit("b")
    circuit = lim.record(circuit, BREAKER, succeeded=False, now=T0)
    assert circuit.state is lim.CircuitState.OPEN and circuit.opened_at == T0


def test_open_breaker_waits_then_admits_one_trial() -> None:
    circuit = lim.Circuit("b", lim.CircuitState.OPEN, 3, T0)
    verdict, wait = lim.admit(circuit, BREAKER, T0 + timedelta(seconds=10))
    assert verdict is lim.Admission.WAIT and wait == pytest.approx(20.0)
    verdict, _ = lim.admit(circuit, BREAKER, T0 + timedelta(seconds=30))
    assert verdict is lim.Admission.TRIAL
    trial = lim.start_trial(circuit, T0 + timedelta(seconds=30))
    assert trial.state is lim.CircuitState.HALF_OPEN
    # While the trial runs, everything else waits.
    verdict, wait = lim.admit(trial, BREAKER, T0 + timedelta(seconds=31))
    assert verdict is lim.Admission.WAIT and wait == pytest.approx(29.0)
    # A trial that never reported (its worker died) is taken over after reset_after.
    assert lim.admit(trial, BREAKER, T0 + timedelta(seconds=61))[0] is lim.Admission.TRIAL


def test_trial_success_closes_and_trial_failure_reopens() -> None:
    trial = lim.start_trial(lim.Circuit("b", lim.CircuitState.OPEN, 3, T0), T0)
    assert lim.record(trial, BREAKER, succeeded=True, now=T0).state is lim.CircuitState.CLOSED
    later = T0 + timedelta(seconds=45)
    reopened = lim.record(trial, BREAKER, succeeded=False, now=later)
    assert (reopened.state, reopened.opened_at) == (lim.CircuitState.OPEN, later)
    assert lim.admit(lim.Circuit("c"), BREAKER, T0) == (lim.Admission.RUN, 0.0)
