"""A worker cut off by the network, not frozen: its process runs on, alone.

One worker runs in a network namespace of its own and reaches PostgreSQL only through a TCP
forwarder on its veth link (``tests/acceptance/netns.py``); a second worker runs normally on
loopback. The test takes the link down (packets dropped, connections not reset) for longer than
the TTL while the isolated worker executes one job with three more prefetched, then brings it
back. The fleet must move the isolated worker's jobs on within TTL + one check interval + 1 s of
the cut (max(TTL, 5 s) + check + 1 s if the cut left one of its transactions open: the server
holds its locks until the idle-in-transaction timeout); after the heal none of its writes may be
accepted, only the job it was executing may have run twice (never a prefetched one), and it must
rejoin the fleet and take new work.

Needs root (``ip netns``); skipped otherwise. Short fleet timings as in ``test_failover.py``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from ledgerq.core.fleet import WorkerState
from ledgerq.store.engine import IDLE_IN_TRANSACTION_SECONDS
from tests.acceptance.conftest import Ledger, Proc, Procs
from tests.acceptance.netns import Forwarder, IsolatedHost
from tests.acceptance.test_failover import CHECK, FLEET_ENV, TTL, Fleet, job_row
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(120)

Make = Callable[[str], Ledger]
#: The failover bound the test holds the fleet to, from the cut.
BOUND = TTL + CHECK + 1.0
#: The bound when the cut caught the worker inside a transaction (between two statements, e.g.
#: in the middle of a heartbeat): the server keeps that transaction's row locks, which the
#: failover waits for, until it closes the idle session (``IDLE_IN_TRANSACTION_SECONDS``).
#: With the default TTL (15 s) this is within the TTL; with this test's 1.5 s it is not.
LOCKED_BOUND = max(TTL, IDLE_IN_TRANSACTION_SECONDS) + CHECK + 1.0
#: How long the link stays down: past the bound, so the fleet acts while the worker is cut off.
PARTITION = BOUND + 1.5
LOCKED_PARTITION = LOCKED_BOUND + 1.5
#: The first attempt of the job the isolated worker executes at the cut: long enough to
#: outlast the set-up and the partition, so its completion is sent after the heal.
FIRST_SECONDS = 15.0
#: When, after the cut, to look for transactions the worker left open.
SETTLED = 0.3
#: A queue only the isolated worker consumes.
ISOLATED_QUEUE = "isolated"


class Partition:
    """A namespace for one worker and the forwarder that is its only way to the ledger."""

    def __init__(self, host: IsolatedHost, forwarder: Forwarder) -> None:
        self.host = host
        self.forwarder = forwarder

    def url(self, url: str) -> str:
        """``url`` (a loopback database) as seen from inside the namespace."""
        through = sa.make_url(url).set(host=self.host.root_address, port=self.forwarder.port)
        return through.render_as_string(hide_password=False)

    def worker(self, procs: Procs, db: Ledger, *args: str) -> Proc:
        """A worker started inside the namespace, on the forwarded database URL."""
        return procs.worker(self.url(db.url), *args, env=FLEET_ENV, prefix=self.host.prefix)

    def open_transactions(self, fleet: Fleet) -> int:
        """Sessions relayed by the forwarder that sit idle inside a transaction."""
        ports = sorted(self.forwarder.upstream_ports)
        stmt = sa.text(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE client_port = ANY(:ports) AND state LIKE 'idle in transaction%'"
        )
        with fleet.engine.connect() as conn:
            return int(conn.execute(stmt, {"ports": ports}).scalar_one())


@pytest.fixture
def partition(procs: Procs) -> Iterator[Partition]:
    """A namespace with a forwarder to the shared PostgreSQL. Torn down even when the test
    fails: the processes first (one in the namespace may be cut off), then the forwarder
    (its upstream sessions end), then the link and the namespace."""
    host = IsolatedHost.create(str(os.getpid()))
    forwarder = None
    try:
        target = sa.make_url(
            os.environ.get("LEDGERQ_TEST_POSTGRES_URL", "postgresql://x@127.0.0.1")
        )
        forwarder = Forwarder(host.root_address, (target.host or "127.0.0.1", target.port or 5432))
        yield Partition(host, forwarder)
    finally:
        procs.kill_all()
        if forwarder is not None:
            forwarder.close()
        host.close()


#: The variant whose slot frees during the cut: the executing job's first attempt ends this
#: long after the cut (a helper's probe saw a prefetched job started then run twice).
FREES_AFTER_CUT = 0.8
FREEING_FIRST_SECONDS = 8.0


@pytest.mark.parametrize(
    "slot_frees_during_cut", [False, True], ids=["executing-through", "slot-frees-during-cut"]
)
def test_a_partitioned_worker_is_failed_over_refused_and_rejoins(
    ledger: Make, procs: Procs, partition: Partition, slot_frees_during_cut: bool
) -> None:
    """With ``slot_frees_during_cut`` the executing job ends 0.8 s into the partition, so the
    slot takes a prefetched job while the worker cannot tell the link is cut: the job's lease
    was last renewed before the cut, so the slot confirms it first, which does not get through
    until the heal and is then refused; the job never starts there."""
    first_seconds = FREEING_FIRST_SECONDS if slot_frees_during_cut else FIRST_SECONDS
    db = ledger("postgresql")
    fleet = Fleet(db.url)
    try:
        isolated = partition.worker(
            procs,
            db,
            *("--concurrency", "1", "--prefetch", "3", "--queues", f"default,{ISOLATED_QUEUE}"),
        )
        wait_until(lambda: len(fleet.active()) == 1, timeout=30, what="isolated worker registered")
        # ``stubborn``: a first attempt that sleeps on whatever happens, later attempts that
        # return at once; every run records its start (through the forwarder, for this worker).
        first = db.effects.stubborn.enqueue("first", first_seconds).job_id
        wait_until(db.start_rows, timeout=30, what="the first job started")
        first_started = time.monotonic()
        prefetched = [db.effects.stubborn.enqueue(f"p{i}", 0.2).job_id for i in range(3)]
        isolated_id = str(job_row(db, first).worker_id)
        wait_until(
            lambda: all(job_row(db, i).worker_id == isolated_id for i in prefetched),
            timeout=10,
            what="three jobs prefetched by the isolated worker",
        )
        survivor = procs.worker(db.url, "--concurrency", "4", "--queues", "default", env=FLEET_ENV)
        wait_until(lambda: len(fleet.active()) == 2, timeout=30, what="survivor registered")

        moved = [first, *prefetched]
        if slot_frees_during_cut:
            cut_due = first_started + first_seconds - FREES_AFTER_CUT
            assert time.monotonic() < cut_due, "set-up too slow for this run"
            time.sleep(cut_due - time.monotonic())  # the cut lands just before the job ends
        cut_at = datetime.now(UTC)
        cut = time.monotonic()
        partition.host.cut()
        try:
            # Whatever the worker had sent before the cut has been answered by now: a
            # transaction still open stays open, its next statement lost on the link.
            time.sleep(SETTLED)
            held = partition.open_transactions(fleet)
            bound, link_down = (LOCKED_BOUND, LOCKED_PARTITION) if held else (BOUND, PARTITION)
            wait_until(
                lambda: any(
                    e["worker_id"] == isolated_id for e in fleet.admin.list_failover_events()
                ),
                timeout=LOCKED_BOUND + 10,
                what="the isolated worker failed over",
            )
            to_event = time.monotonic() - cut
            rows = wait_until(
                lambda: (
                    (rs := [job_row(db, i) for i in moved])
                    and all(r.state == "succeeded" for r in rs)
                    and rs
                ),
                timeout=LOCKED_BOUND + 10,
                what="every job of the isolated worker finished on the survivor",
            )
            to_running = max(
                (r.started_at.replace(tzinfo=UTC) - cut_at).total_seconds() for r in rows
            )
            worker = fleet.admin.get_worker(isolated_id)
            assert worker is not None and worker.state is WorkerState.DEAD
            time.sleep(max(0.0, link_down - (time.monotonic() - cut)))
        finally:
            partition.host.heal()
        healed = time.monotonic()
        if not slot_frees_during_cut:
            # The first attempt's body was still running: its completion is sent after the heal.
            assert healed - first_started < first_seconds - 1.0, "set-up too slow for this run"
        assert "stale completion refused" not in isolated.log()

        # Rejoin: its heartbeat is refused, it gives up its jobs and registers again.
        wait_until(
            lambda: "declared dead by the fleet" in isolated.log(), timeout=20, what="it noticed"
        )
        to_noticed = time.monotonic() - healed
        wait_until(
            lambda: (w := fleet.admin.get_worker(isolated_id)) and w.state is WorkerState.ACTIVE,
            timeout=20,
            what="it registered again",
        )
        to_rejoined = time.monotonic() - healed
        # Its late completion of the first job is refused; the survivor's results stand.
        wait_until(
            lambda: "stale completion refused" in isolated.log(),
            timeout=first_seconds + 10,
            what="its late completion refused",
        )
        for job_id, key in zip(moved, ["first", "p0", "p1", "p2"], strict=True):
            row = job_row(db, job_id)
            assert (row.state, row.attempt, row.result) == ("succeeded", 2, f'"{key}@2"')
            assert row.worker_id != isolated_id
        history = wait_until(
            lambda: (
                (h := {(r["job_id"], r["attempt"]): r for r in fleet.admin.list_assignments()})
                and all((i, 2) in h and h[(i, 2)]["outcome"] == "succeeded" for i in moved)
                and h
            ),
            timeout=10,
            what="the survivor's attempts recorded",
        )
        for job_id in moved:
            assert history[(job_id, 1)]["worker_id"] == isolated_id
            assert history[(job_id, 1)]["outcome"] == "failed_over"

        # A working member again: it takes a job only it can take.
        later = db.effects.record_effect.enqueue("after", queue=ISOLATED_QUEUE).job_id
        wait_until(lambda: job_row(db, later).state == "succeeded", timeout=20, what="new work")
        assert job_row(db, later).worker_id == isolated_id

        # Duplicates bounded: only the job executing at the cut ran twice, no prefetched one.
        starts = db.start_rows()
        runs = {i: sorted(a for _, j, a in starts if j == i) for i in moved}
        assert runs == {first: [1, 2], **{i: [2] for i in prefetched}}, (
            runs,
            isolated.log()[-3000:],
        )
        assert db.duplicate_rows() == []

        print(
            f"\npartition: cut -> failover event {to_event:.2f} s, cut -> every job running"
            f" again {to_running:.2f} s (bound {bound:.1f} s; transactions open at the cut:"
            f" {held}); link down {link_down:.1f} s; heal -> noticed {to_noticed:.2f} s,"
            f" -> registered again {to_rejoined:.2f} s"
        )
        assert to_running <= bound, rows

        for proc in (isolated, survivor):
            proc.signal(signal.SIGTERM)
        for proc in (isolated, survivor):
            assert proc.wait(20) == 0, proc.log()[-3000:]
    finally:
        fleet.close()
