"""ledgerq: a distributed job queue whose SQL database is the truth.

Everything an application needs is exported here; nothing in the documentation needs an
import from a submodule. The heavier names (``_IMPORTED_ON_FIRST_USE``: ``LedgerQ``,
``Task``, ``Breaker``, ...) are imported on first use, so that importing any submodule, such
as the command line's, does not import them all.
"""

import importlib as _importlib
import typing as _typing

from ledgerq.core.errors import (
    ConfigError,
    InvalidJob,
    InvalidLock,
    InvalidSchedule,
    JobFailed,
    JobNotFound,
    JobSpooled,
    LeaseLost,
    LedgerqError,
    LockUnavailable,
    PayloadError,
    SpoolUnavailable,
    StaleClaim,
    StoreError,
    StoreUnavailable,
    TaskNotRegistered,
    WaitTimeout,
)
from ledgerq.core.job import EnqueueResult, Job
from ledgerq.core.outcomes import Cancel, Discard, Retry
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.states import JobState

if _typing.TYPE_CHECKING:
    from ledgerq.app.application import LedgerQ
    from ledgerq.app.task import Task
    from ledgerq.app.worker_overrides import WorkerOverrides
    from ledgerq.config.settings import Settings
    from ledgerq.core.batches import BatchNotFound, BatchStatus
    from ledgerq.core.limits import Breaker
    from ledgerq.core.schedules import Schedule
    from ledgerq.core.schema import MigrationStatus
    from ledgerq.core.workflow import WorkflowNotFound
    from ledgerq.producer.batch_builder import Batch
    from ledgerq.producer.job_handle import JobHandle, SpooledHandle
    from ledgerq.producer.workflow_api import Workflow
    from ledgerq.runtime.context import JobContext
    from ledgerq.runtime.job_hooks import JobHooks
    from ledgerq.runtime.lock_handles import HeldLock

_IMPORTED_ON_FIRST_USE = {
    "Batch": "ledgerq.producer.batch_builder",
    "BatchNotFound": "ledgerq.core.batches",
    "BatchStatus": "ledgerq.core.batches",
    "Breaker": "ledgerq.core.limits",
    "MigrationStatus": "ledgerq.core.schema",
    "Schedule": "ledgerq.core.schedules",
    "WorkflowNotFound": "ledgerq.core.workflow",
    "HeldLock": "ledgerq.runtime.lock_handles",
    "JobContext": "ledgerq.runtime.context",
    "JobHooks": "ledgerq.runtime.job_hooks",
    "JobHandle": "ledgerq.producer.job_handle",
    "LedgerQ": "ledgerq.app.application",
    "Settings": "ledgerq.config.settings",
    "SpooledHandle": "ledgerq.producer.job_handle",
    "Task": "ledgerq.app.task",
    "Workflow": "ledgerq.producer.workflow_api",
    "WorkerOverrides": "ledgerq.app.worker_overrides",
}

__all__ = [
    "Batch",
    "BatchNotFound",
    "BatchStatus",
    "Breaker",
    "Cancel",
    "ConfigError",
    "Discard",
    "EnqueueResult",
    "HeldLock",
    "InvalidJob",
    "InvalidLock",
    "InvalidSchedule",
    "Job",
    "JobContext",
    "JobFailed",
    "JobHandle",
    "JobHooks",
    "JobNotFound",
    "JobSpooled",
    "JobState",
    "LeaseLost",
    "LedgerQ",
    "LedgerqError",
    "LockUnavailable",
    "MigrationStatus",
    "PayloadError",
    "Retry",
    "RetryPolicy",
    "Schedule",
    "Settings",
    "SpoolUnavailable",
    "SpooledHandle",
    "StaleClaim",
    "StoreError",
    "StoreUnavailable",
    "Task",
    "TaskNotRegistered",
    "WaitTimeout",
    "WorkerOverrides",
    "Workflow",
    "WorkflowNotFound",
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
