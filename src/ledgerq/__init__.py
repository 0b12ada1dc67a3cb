"""ledgerq: a distributed job queue whose SQL database is the truth."""

from ledgerq.application import LedgerQ
from ledgerq.config import Settings
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
from ledgerq.runtime.context import JobContext
from ledgerq.task import Task

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
