"""Fleet-wide limits of tasks: rate limits, concurrency limits and circuit breakers.

Pure policy (parsing, the breaker's state machine, naming of limit keys); the shared state lives
behind the ``RateLimitBackend`` and ``LimitStore`` ports, so every worker and web instance of
an application counts against the same limit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from ledgerq.core import errors

#: Seconds per unit of a rate string.
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([a-z]+)\s*$")

#: Keys computed from job arguments are cut to this many characters (the name column's room).
MAX_KEY_CHARS = 120

KeyFunction = Callable[..., Any]


@dataclass(frozen=True, slots=True)
class Rate:
    """``limit`` admissions per ``period_seconds``, enforced as GCRA (a leaky bucket as a
    meter): admissions are spaced ``period / limit`` apart on average, and up to ``burst``
    may go at once after a quiet spell. Any window of one period holds at most
    ``limit + burst - 1`` admissions; with the default ``burst=1``, at most ``limit``."""

    limit: int
    period_seconds: float
    burst: int = 1

    @property
    def interval_seconds(self) -> float:
        """The spacing of admissions at the full rate."""
        return self.period_seconds / self.limit

    @property
    def tolerance_seconds(self) -> float:
        """How far ahead of the clock the schedule may run (what lets a burst through)."""
        return (self.burst - 1) * self.interval_seconds

    @classmethod
    def parse(cls, text: str, *, burst: int = 1) -> Rate:
        """Parse ``"100/s"``, ``"20/m"``, ``"1000/h"`` or ``"5/10s"``; raise ``ConfigError``."""
        match = _RATE.match(text.lower()) if isinstance(text, str) else None
        if match is None or match.group(3) not in _UNITS:
            raise errors.ConfigError(
                f"invalid rate limit {text!r}: use COUNT/UNIT such as '100/s', '20/m', '1000/h'"
            )
        count, multiple, unit = int(match.group(1)), match.group(2), match.group(3)
        period = (int(multiple) if multiple else 1) * _UNITS[unit]
        if count < 1 or period <= 0:
            raise errors.ConfigError(f"invalid rate limit {text!r}: count and period must be > 0")
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise errors.ConfigError(f"invalid rate limit burst {burst!r}: use an integer >= 1")
        return cls(count, period, burst)

    def __str__(self) -> str:
        return f"{self.limit}/{self.period_seconds:g}s"


@dataclass(frozen=True, slots=True)
class RateDecision:
    """Whether a rate limiter admitted one more use, and if not, when to try again."""

    allowed: bool
    retry_after_seconds: float = 0.0

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True, slots=True)
class Breaker:
    """A circuit breaker: ``failures`` consecutive failed runs open it; after
    ``reset_after`` seconds one half-open trial runs; its success closes the circuit, its
    failure opens it again. ``key`` (optional) computes a sub-key from the job's arguments."""

    failures: int = 5
    reset_after: float = 30.0
    key: KeyFunction | None = None

    def __post_init__(self) -> None:
        if self.failures < 1:
            raise errors.ConfigError("Breaker(failures=...) must be at least 1")
        if self.reset_after <= 0:
            raise errors.ConfigError("Breaker(reset_after=...) must be positive seconds")


@dataclass(frozen=True, slots=True)
class TaskLimits:
    """The limits of one task, each optionally per key computed from the job's arguments."""

    rate: Rate | None = None
    rate_key: KeyFunction | None = None
    concurrency: int | None = None
    concurrency_key: KeyFunction | None = None
    breaker: Breaker | None = None

    @classmethod
    def build(
        cls,
        *,
        rate_limit: str | None,
        rate_key: KeyFunction | None,
        concurrency_limit: int | None,
        concurrency_key: KeyFunction | None,
        breaker: Breaker | None,
    ) -> TaskLimits | None:
        """Check the options of ``@app.task``; None when the task has no limit at all."""
        if rate_key is not None and rate_limit is None:
            raise errors.ConfigError("rate_key needs rate_limit")
        if concurrency_key is not None and concurrency_limit is None:
            raise errors.ConfigError("concurrency_key needs concurrency_limit")
        if concurrency_limit is not None and (
            isinstance(concurrency_limit, bool)
            or not isinstance(concurrency_limit, int)
            or concurrency_limit < 1
        ):
            raise errors.ConfigError(
                f"concurrency_limit must be an integer >= 1, not {concurrency_limit!r}"
            )
        if breaker is not None and not isinstance(breaker, Breaker):
            raise errors.ConfigError("breaker must be a ledgerq Breaker(failures=, reset_after=)")
        for fn in (rate_key, concurrency_key):
            if fn is not None and not callable(fn):
                raise errors.ConfigError("rate_key and concurrency_key must be callables")
        rate = task_rate(rate_limit) if rate_limit is not None else None
        if rate is None and concurrency_limit is None and breaker is None:
            return None
        return cls(rate, rate_key, concurrency_limit, concurrency_key, breaker)


#: A task's rate limit lets this share of its limit go at once (at least one).
TASK_BURST_SHARE = 0.1


def task_rate(text: str) -> Rate:
    """A task's rate: ``text`` with a burst of 10% of the limit. Workers ask the shared
    limiter a few milliseconds late; without a little slack every late question would be
    admission time lost for good, and a saturated limit would run below its rate. Any period
    then holds at most 10% more than the limit; over many periods the rate is the limit."""
    rate = Rate.parse(text)
    return Rate(rate.limit, rate.period_seconds, max(1, int(rate.limit * TASK_BURST_SHARE)))


def limit_name(kind: str, task: str, key_fn: KeyFunction | None, args: Any, kwargs: Any) -> str:
    """The fleet-wide name of one limit: ``task`` or ``task[key]`` with the key computed from
    the job's arguments. A key function that fails raises ``ValueError``."""
    if key_fn is None:
        return f"{kind}:{task}"[: MAX_KEY_CHARS + 80]
    try:
        key = key_fn(*args, **kwargs)
    except Exception as exc:  # user code; reported as a job failure by the gate
        raise ValueError(f"limit key function of {task!r} failed: {exc!r}") from exc
    return f"{kind}:{task}[{str(key)[:MAX_KEY_CHARS]}]"


# -- the circuit breaker's state machine ------------------------------------------------------


class CircuitState(StrEnum):
    """Where a breaker stands; the gauge value is ``GAUGE[state]``."""

    CLOSED = "closed"
    HALF_OPEN = "half_open"
    OPEN = "open"


GAUGE = {CircuitState.CLOSED: 0, CircuitState.HALF_OPEN: 1, CircuitState.OPEN: 2}


@dataclass(frozen=True, slots=True)
class Circuit:
    """One breaker's shared state (a row of ``circuit_breakers``)."""

    name: str
    state: CircuitState = CircuitState.CLOSED
    failures: int = 0
    opened_at: datetime | None = None
    trial_started_at: datetime | None = None
    updated_at: datetime | None = None


class Admission(StrEnum):
    """What a breaker says about one run: ``run``, ``trial`` (the half-open probe) or ``wait``."""

    RUN = "run"
    TRIAL = "trial"
    WAIT = "wait"


def admit(circuit: Circuit, breaker: Breaker, now: datetime) -> tuple[Admission, float]:
    """Decide one run; return the admission and, for ``wait``, seconds until it may try again.

    A half-open trial whose run left no outcome for ``reset_after`` (its worker died) is
    taken over by the next run, so a lost trial cannot hold the circuit half-open forever.
    """
    reset = timedelta(seconds=breaker.reset_after)
    if circuit.state is CircuitState.CLOSED:
        return Admission.RUN, 0.0
    if circuit.state is CircuitState.OPEN:
        due = (circuit.opened_at or now) + reset
    else:
        due = (circuit.trial_started_at or now) + reset
    if now >= due:
        return Admission.TRIAL, 0.0
    return Admission.WAIT, (due - now).total_seconds()


def start_trial(circuit: Circuit, now: datetime) -> Circuit:
    """The circuit after a run was admitted as its half-open trial."""
    return Circuit(circuit.name, CircuitState.HALF_OPEN, circuit.failures, circuit.opened_at, now)


def record(circuit: Circuit, breaker: Breaker, *, succeeded: bool, now: datetime) -> Circuit:
    """The circuit after one run's outcome: a success closes it and clears the count; a
    failure counts, opens a closed circuit at ``breaker.failures`` and re-opens a half-open one.
    """
    if succeeded:
        return Circuit(circuit.name)
    failures = circuit.failures + 1
    if circuit.state is CircuitState.HALF_OPEN or (
        circuit.state is CircuitState.CLOSED and failures >= breaker.failures
    ):
        return Circuit(circuit.name, CircuitState.OPEN, failures, now)
    return Circuit(
        circuit.name, circuit.state, failures, circuit.opened_at, circuit.trial_started_at
    )


class RateLimiter:
    """A named fleet-wide rate limit for application code (``app.rate_limiter``): every
    process using the same name and backend shares one window per key."""

    def __init__(self, backend: Any, name: str, rate: Rate) -> None:
        """``backend`` is a ``RateLimitBackend``; ``name`` must be non-empty."""
        if not name or len(name) > 80:
            raise errors.ConfigError("a rate limiter needs a name of 1 to 80 characters")
        self._backend = backend
        self.name = name
        self.rate = rate

    def try_acquire(self, key: object = None) -> RateDecision:
        """Use one admission of ``key``'s window (or the limiter's only window); return the
        decision with ``retry_after_seconds`` when denied. Never blocks."""
        full = f"app:{self.name}" if key is None else f"app:{self.name}[{str(key)[:MAX_KEY_CHARS]}]"
        decision: RateDecision = self._backend.acquire_rate(name=full, rate=self.rate)
        return decision


class FallbackRates:
    """A RateLimitBackend that asks ``primary`` (Redis) and, while it fails with
    ``TransportError``, ``fallback`` (the database). The two keep separate windows, so around
    a switch a limit may admit up to twice its rate for one period; it never stops admitting."""

    def __init__(self, primary: Any, fallback: Any) -> None:
        self._primary = primary
        self._fallback = fallback
        self.fallback_active = False
        """True while the last decision came from the fallback."""

    def acquire_rate(self, *, name: str, rate: Rate) -> RateDecision:
        """One decision from the primary, or from the fallback if the primary failed."""
        try:
            decision: RateDecision = self._primary.acquire_rate(name=name, rate=rate)
        except errors.TransportError:
            self.fallback_active = True
            fallback: RateDecision = self._fallback.acquire_rate(name=name, rate=rate)
            return fallback
        self.fallback_active = False
        return decision
