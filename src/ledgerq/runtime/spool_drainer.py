"""SpoolDrainer: every worker's loop that replays the enqueue spool (``LEDGERQ_SPOOL``) into
the ledger once the database answers, one producer at a time, each in its write order."""

from __future__ import annotations

import contextlib

import structlog

from ledgerq.core import errors, spool
from ledgerq.core.job import JobHint
from ledgerq.core.ports import JobStore, Transport
from ledgerq.runtime.service import PeriodicService

log = structlog.get_logger("ledgerq.spool")

#: Seconds between looks at a spool that was empty or could not be replayed.
DRAIN_INTERVAL_SECONDS = 1.0


class SpoolDrainer(PeriodicService):
    """Each tick replays every producer's entries that no other drainer holds (see
    ``core.spool.replay``: each job is created at most once by its dedupe key, and leaves the
    spool only after its commit). A database still down ends the tick quietly (it is
    counted in ``failures``); the next tick tries again."""

    thread_name = "ledgerq-spool-drainer"
    logger = log
    failure_message = "spool replay failed; will try again"
    join_seconds: float | None = 5.0

    def __init__(
        self,
        target: spool.Spool,
        store: JobStore,
        transport: Transport,
        *,
        interval_seconds: float = DRAIN_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(interval_seconds)
        self._spool = target
        self._store = store
        self._transport = transport
        self.replayed = 0
        """Jobs this drainer moved from the spool into the ledger."""

    def tick(self) -> None:
        """Replay what the spool holds; a spool that cannot be read is logged and skipped."""
        try:
            producers = self._spool.producers()
        except errors.SpoolUnavailable as exc:
            log.warning("spool unreadable", error=str(exc))
            return
        for producer in producers:
            if self.stopping:
                return
            try:
                self.replayed += drain_producer(
                    self._spool, self._store, producer, self._announce, self.stopping_flag
                )
            except errors.SpoolCorrupt as exc:
                # Kept for an operator (``ledgerq spool status``); other producers go on.
                log.error(
                    "spool entry unreadable; producer skipped", producer=producer, error=str(exc)
                )

    def stopping_flag(self) -> bool:
        """Whether a stop was asked for (checked between replay batches)."""
        return self.stopping

    def _announce(self, hints: list[JobHint]) -> None:
        # A failed push costs latency only: the reconciler re-sends the ids of queued jobs.
        if hints:
            with contextlib.suppress(errors.TransportError):
                self._transport.push(hints)


def drain_producer(
    target: spool.Spool,
    store: JobStore,
    producer: str,
    announce: spool.Announce | None = None,
    should_stop: spool.StopCheck = lambda: False,
) -> int:
    """Replay ``producer``'s entries if no other drainer holds them; the jobs replayed.
    ``StoreUnavailable`` propagates (the rest stays spooled)."""
    done = 0
    with target.hold(producer) as held:
        if not held:
            return 0
        for count in spool.replay(
            target, store, producer, announce=announce, should_stop=should_stop
        ):
            done += count
    if done:
        log.info("spool replayed", producer=producer, jobs=done)
    return done
