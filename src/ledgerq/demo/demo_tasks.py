"""The demo's tasks: fast, slow, flaky (fail then succeed), doomed (always fail) and async.

``app`` is what the demo's worker processes load (``--app ledgerq.demo.demo_tasks:app``); its
settings come from ``LEDGERQ_*`` as for any application, and it connects on first use only.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from ledgerq.app.application import LedgerQ
from ledgerq.app.task import Task
from ledgerq.runtime.context import JobContext

#: Queues the demo's tasks use; the demo's workers take jobs from all of them.
QUEUES = ("sms", "media", "inventory", "reports", "partners")
#: First retry delay of the failing tasks, in seconds (doubling after): small, so the demo
#: does not sit waiting for backoffs.
RETRY_BACKOFF_SECONDS = 0.05
#: Attempts a flaky job may use; it fails at most twice, so it always succeeds in time.
FLAKY_MAX_ATTEMPTS = 4
#: Attempts a doomed job gets before it is ``dead``.
DOOMED_MAX_ATTEMPTS = 3


def send_sms(ctx: JobContext, message_id: int) -> str:
    """Pretend to hand one SMS to a gateway: sign the text and return the gateway's id."""
    text = f"Your code is {message_id % 1_000_000:06d}".encode()
    return hashlib.sha256(text).hexdigest()[:16]


async def make_thumbnail(ctx: JobContext, image_id: int) -> dict[str, int]:
    """Pretend to fetch an image and shrink it (a few milliseconds of awaited I/O)."""
    await asyncio.sleep(0.002)
    return {"image_id": image_id, "bytes": 1024 + image_id % 4096}


def render_report(ctx: JobContext, report_id: int, millis: int) -> int:
    """Pretend to build a report: ``millis`` milliseconds of blocking I/O."""
    time.sleep(millis / 1000)
    return report_id


def sync_inventory(ctx: JobContext, sku: int, failures: int) -> int:
    """Fail the first ``failures`` attempts (a flaky warehouse API), then succeed."""
    if ctx.attempt <= failures:
        raise ConnectionError(f"warehouse API timed out for sku {sku} (attempt {ctx.attempt})")
    return sku


def call_legacy_api(ctx: JobContext, request_id: int) -> None:
    """Always fail: the partner API is gone, so these jobs end ``dead``."""
    raise RuntimeError(f"partner API rejected request {request_id}: HTTP 410 Gone")


def register(app: LedgerQ) -> dict[str, Task[..., Any]]:
    """Register the demo's tasks on ``app``; return them by name."""
    backoff = RETRY_BACKOFF_SECONDS
    return {
        "send_sms": app.task(name="send_sms", queue="sms")(send_sms),
        "make_thumbnail": app.task(name="make_thumbnail", queue="media")(make_thumbnail),
        "render_report": app.task(name="render_report", queue="reports", timeout=10)(render_report),
        "sync_inventory": app.task(
            name="sync_inventory",
            queue="inventory",
            max_attempts=FLAKY_MAX_ATTEMPTS,
            retry_backoff=backoff,
        )(sync_inventory),
        "call_legacy_api": app.task(
            name="call_legacy_api",
            queue="partners",
            max_attempts=DOOMED_MAX_ATTEMPTS,
            retry_backoff=backoff,
        )(call_legacy_api),
    }


app = LedgerQ()
register(app)
