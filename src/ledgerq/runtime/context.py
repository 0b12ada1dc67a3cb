"""JobContext: what a running handler knows about its job, and whether it still owns it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ledgerq.core import errors
from ledgerq.core.codec import PayloadCodec
from ledgerq.core.items import JobItemStore
from ledgerq.core.job import Claim, Job
from ledgerq.runtime.item_tracker import ItemTracker


@dataclass(slots=True)
class JobContext:
    """Passed as the first argument to every task handler.

    ``owns_job`` turns False when a fenced heartbeat was refused (the job was cancelled,
    failed over or re-claimed): a long job should check it before side effects that cannot be
    repeated. ``stop_requested`` is set when the worker shuts down or the job timed out.
    """

    job: Job
    item_store: JobItemStore | None = None
    _items: ItemTracker | None = None
    # Plain flags, not Events: one context is made per job on the hot path, and a flag set by
    # one thread and read by another is safe under the GIL.
    _lost: bool = False
    _stop: bool = False
    _completing: bool = False
    _taken_back: bool = False
    started_mono: float | None = None
    """Monotonic time at which the body started (None while the job waits to start)."""
    start_written: bool = False
    """Whether ``StartMarks`` wrote the body's start to the ledger."""
    confirmed_at: float = 0.0
    """Monotonic time at which a claim or heartbeat that renewed this run's lease was sent:
    the lease is good until at least a lease's length after it."""

    @property
    def job_id(self) -> int:
        """The job's id."""
        return self.job.id

    @property
    def attempt(self) -> int:
        """This run's number (1 for the first run): claims a rate or concurrency limit
        postponed without running the job are not counted (``Job.runs``). The fencing token is
        ``claim.attempt``, which counts every claim."""
        return self.job.runs

    @property
    def claim(self) -> Claim:
        """The (id, attempt) pair every write of this run is fenced on."""
        return Claim(self.job.id, self.job.attempt)

    @property
    def owns_job(self) -> bool:
        """Whether this run still owns the job in the ledger, as of the last heartbeat."""
        return not self._lost

    @property
    def stop_requested(self) -> bool:
        """Whether the worker asked running jobs to wind down."""
        return self._stop

    @property
    def completing(self) -> bool:
        """Whether this run ended and its outcome is being written."""
        return self._completing

    def mark_completing(self) -> None:
        """Record that the run ended; a refused heartbeat from now on is expected."""
        self._completing = True

    def begin(self, now: float) -> bool:
        """Record that the body starts at ``now`` (monotonic); False if the worker took the
        job back first (``take_back``): then it must not run.

        With ``take_back`` this is a handshake on plain flags, each side writing its own
        before reading the other's (the GIL orders them): at least one side sees the other,
        so a job put back as never started never runs. Both seeing each other (a start
        taken back in the same instant) puts it back as started: it spends an attempt it did
        not use, never runs one it did not pay for."""
        self.started_mono = now
        return not self._taken_back

    def take_back(self) -> bool:
        """Keep the body from starting from now on (the worker puts the job back); return
        whether it had started (see ``begin``)."""
        self._taken_back = True
        return self.started_mono is not None

    def confirm(self, sent_at: float) -> None:
        """Record that a write sent at ``sent_at`` (monotonic) renewed this run's lease."""
        self.confirmed_at = max(self.confirmed_at, sent_at)

    def mark_lost(self) -> None:
        """Record that the ledger refused this run's fenced write."""
        self._lost = True

    def request_stop(self) -> None:
        """Ask the handler to wind down."""
        self._stop = True

    def items(self, keys: Iterable[object]) -> Iterator[str]:
        """Iterate over ``keys`` (as strings), skipping those a previous attempt finished; each
        item whose loop body ends without an exception is recorded as done (buffered, see
        ``runtime.items``). Raise ``LeaseLost`` once this attempt no longer owns the job."""
        return self._tracker().iterate(keys)

    def item_done(self, key: object, result: object = None, *, tx: object | None = None) -> None:
        """Record item ``key`` as done now, with an optional JSON ``result``. With ``tx`` (a
        SQLAlchemy connection to the ledger's database, inside the transaction that wrote the
        item's effect) the record commits or rolls back with the effect: exactly once. Raise
        ``LeaseLost`` if this attempt lost its job, ``ItemAlreadyDone`` if it was recorded."""
        self.items_done([key], tx=tx, results=[result])

    def item_chunks(self, keys: Iterable[object], size: int = 100) -> Iterator[list[str]]:
        """Like ``items``, in lists of up to ``size`` unfinished keys: write a chunk's
        effects in one transaction with ``items_done(chunk, tx=...)``."""
        return self._tracker().iterate_chunks(keys, size)

    def items_done(
        self, keys: Iterable[object], *, tx: object | None = None, results: Iterable[object] = ()
    ) -> None:
        """``item_done`` for many keys in one write (``results``, if given, pair up with
        ``keys``)."""
        listed = list(keys)
        paired = list(results) or [None] * len(listed)
        if len(paired) != len(listed):
            raise errors.InvalidJob("items_done: give one result per key, or none")
        try:
            self._tracker().mark_done(list(zip(listed, paired, strict=True)), tx)
        except errors.LeaseLost:
            self.mark_lost()
            raise

    def _tracker(self) -> ItemTracker:
        if self._items is None:
            if self.item_store is None:
                raise errors.ConfigError("batch items need a worker with an item store")
            self._items = ItemTracker(self.item_store, self.claim, PayloadCodec())
        return self._items
