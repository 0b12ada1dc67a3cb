"""Checks of values that come from outside (CLI options, HTTP bodies, Python callers): one rule
per kind of value, so every surface refuses the same input with the same message, before
anything is stored.

Text that travels into SQL must be printable Unicode: PostgreSQL refuses NUL in ``text``,
a lone surrogate (``"\\ud800"``) cannot be encoded as UTF-8 at all, and control characters
in keys and names make log lines and terminals lie.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from ledgerq.core import errors

#: Largest job id: ids are SQL BIGINTs, so a larger number names no job.
MAX_JOB_ID = 2**63 - 1
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def is_encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (False when it holds a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_text(
    value: str,
    *,
    what: str,
    max_length: int,
    error: Callable[[str], Exception] = errors.InvalidJob,
) -> str:
    """Return ``value`` if it is 1 to ``max_length`` printable characters of valid Unicode;
    else raise ``error(message)`` (``InvalidJob`` by default) naming ``what``."""
    if not isinstance(value, str) or not 0 < len(value) <= max_length:
        raise error(f"{what} must be 1 to {max_length} characters")
    if CONTROL_CHARACTERS.search(value):
        raise error(f"{what} must not contain control characters, got {value!r}")
    if not is_encodable(value):
        raise error(f"{what} must be valid Unicode text (it holds a lone surrogate)")
    return value


def check_job_id(job_id: int) -> int:
    """Return ``job_id``; raise ``JobNotFound`` if it is outside 1..2**63-1, where no job
    can be (asking the database would fail on the integer's range instead)."""
    if isinstance(job_id, bool) or not isinstance(job_id, int) or not 0 < job_id <= MAX_JOB_ID:
        raise errors.JobNotFound(job_id)
    return job_id


def check_seconds(value: float, *, what: str) -> float:
    """Return ``value`` if it is a finite, positive number of seconds, else raise
    ``InvalidJob`` (NaN and infinity are never a duration)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise errors.InvalidJob(f"{what} must be a positive, finite number of seconds")
    return float(value)
