"""ledgerq: a distributed job queue whose SQL database is the truth.

The heavier names (``LedgerQ``, ``Settings``, ``Task``, ``JobContext``) are imported on first
use, so that importing any submodule, such as the command line's, does not import them all.
"""

import importlib as _importlib
import typing as _typing

from ledgerq.core.errors import (
    ConfigError,
    InvalidJob,
    JobNotFound,
    LedgerqError,
    PayloadError,
    StaleClaim,
    TaskNotRegistered,
)
from ledgerq.core.job import EnqueueResult, Job
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.states import JobState

if _typing.TYPE_CHECKING:
    from ledgerq.application import LedgerQ
    from ledgerq.config import Settings
    from ledgerq.runtime.context import JobContext
    from ledgerq.task import Task

_IMPORTED_ON_FIRST_USE = {
    "JobContext": "ledgerq.runtime.context",
    "LedgerQ": "ledgerq.application",
    "Settings": "ledgerq.config",
    "Task": "ledgerq.task",
}

__all__ = [
    "ConfigError",
    "EnqueueResult",
    "InvalidJob",
    "Job",
    "JobContext",
    "JobNotFound",
    "JobState",
    "LedgerQ",
    "LedgerqError",
    "PayloadError",
    "RetryPolicy",
    "Settings",
    "StaleClaim",
    "Task",
    "TaskNotRegistered",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> _typing.Any:
    module = _IMPORTED_ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'ledgerq' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
