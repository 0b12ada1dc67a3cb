"""The running job's fields (job_id, queue, task, attempt) on every log line its handler
writes: one context variable set per job, merged by the ``merge_job_context`` processor.
Cheaper on the hot path than structlog's ``bound_contextvars``, which copies and scans the whole
context on every job."""

from __future__ import annotations

from collections.abc import MutableMapping
from contextvars import ContextVar
from typing import Any

JOB_LOG_CONTEXT: ContextVar[dict[str, Any] | None] = ContextVar("ledgerq_job", default=None)


def merge_job_context(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: add the running job's fields (explicit ones win)."""
    fields = JOB_LOG_CONTEXT.get()
    if fields:
        for key, value in fields.items():
            event_dict.setdefault(key, value)
    return event_dict
