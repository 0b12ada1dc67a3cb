"""Retry policy: which exceptions retry, exponential backoff with jitter, then ``dead`` once
attempts are exhausted."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

from ledgerq.core import errors

#: Exception classes, as ``retry_on=`` / ``dont_retry_on=`` hold them.
ExceptionClasses = tuple[type[BaseException], ...]
#: What ``@app.task(retry_on=...)`` accepts: one exception class or a tuple of them.
ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]


def exception_classes(value: Any, what: str) -> ExceptionClasses:
    """``value`` (one exception class or an iterable of them) as a tuple; ``ConfigError``
    when anything in it is not an exception class."""
    items = (value,) if isinstance(value, type) else value
    try:
        classes = tuple(items)
    except TypeError:
        raise errors.ConfigError(f"{what} must be exception classes, not {value!r}") from None
    for item in classes:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise errors.ConfigError(f"{what} must be exception classes, not {item!r}")
    return classes


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failed job is retried.

    The n-th retry waits ``min(cap_seconds, base_seconds * 2**(n-1))`` scaled by a random factor
    in ``[1 - jitter, 1 + jitter]``. ``max_attempts`` counts every start of the job, the first
    included; once a failing attempt reaches it, the job is ``dead``.

    ``retry_on`` (None: every exception) names the exception classes (and their subclasses)
    that retry; any other exception makes the job ``dead`` at once. ``dont_retry_on`` classes
    make it ``dead`` at once, and win over ``retry_on``. Either is one class or a tuple of them;
    anything else is a ``ConfigError``.
    """

    max_attempts: int = 3
    base_seconds: float = 1.0
    cap_seconds: float = 3600.0
    jitter: float = 0.25
    retry_on: ExceptionClasses | None = None
    dont_retry_on: ExceptionClasses = ()

    def __post_init__(self) -> None:
        if self.retry_on is not None:
            object.__setattr__(self, "retry_on", exception_classes(self.retry_on, "retry_on"))
        object.__setattr__(
            self, "dont_retry_on", exception_classes(self.dont_retry_on, "dont_retry_on")
        )
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_seconds < 0 or self.cap_seconds < 0:
            raise ValueError("backoff seconds must not be negative")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must lie between 0 and 1")

    def retries(self, exc: BaseException) -> bool:
        """Whether ``exc`` raised by a handler may retry (attempts left aside)."""
        if isinstance(exc, self.dont_retry_on):
            return False
        return self.retry_on is None or isinstance(exc, self.retry_on)

    def should_retry(self, attempt: int) -> bool:
        """Whether a job whose attempt number ``attempt`` just failed gets another run."""
        return attempt < self.max_attempts

    def delay_seconds(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the run that follows failed attempt ``attempt`` (1-based)."""
        exponent = max(attempt - 1, 0)
        # Cap the exponent first so a job with a huge attempt count cannot overflow a float.
        raw = min(self.cap_seconds, self.base_seconds * 2.0 ** min(exponent, 62))
        factor = 1.0 + self.jitter * (2.0 * (rng or random).random() - 1.0)
        return max(0.0, raw * factor)


def retry_policy(
    max_attempts: int,
    backoff: float | RetryPolicy,
    *,
    retry_on: ExceptionTypes | None = None,
    dont_retry_on: ExceptionTypes = (),
) -> RetryPolicy:
    """The policy of a task registration: ``backoff`` is the first retry's delay or a whole
    policy; ``retry_on`` / ``dont_retry_on``, when given, replace the policy's own. Raises
    ``ConfigError`` for anything that cannot work."""
    try:
        policy = (
            backoff
            if isinstance(backoff, RetryPolicy)
            else RetryPolicy(max_attempts=max_attempts, base_seconds=float(backoff))
        )
        changes: dict[str, Any] = {}
        if retry_on is not None:
            changes["retry_on"] = exception_classes(retry_on, "retry_on")
        if dont_retry_on != ():
            changes["dont_retry_on"] = exception_classes(dont_retry_on, "dont_retry_on")
        return dataclasses.replace(policy, **changes) if changes else policy
    except (TypeError, ValueError) as exc:
        raise errors.ConfigError(f"retry policy: {exc}") from None
