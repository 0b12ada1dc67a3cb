"""Workers follow a PostgreSQL primary switch: a private primary with a synchronous streaming
standby, workers and producers on a multi-host URL (``target_session_attrs=read-write``), the
primary killed mid-run and the standby promoted (the shared servers are never touched).

The standby is made as operators make one (``pg_basebackup -R``), so it inherits the primary's
``synchronous_standby_names = '*'``. Promoted without a standby of its own, it makes every
durable commit wait for a standby that does not exist: completions hang while claims (which do
not wait for the standby) still succeed. Workers used to go on claiming and running jobs whose
outcomes they could not write, silently (issue 30). They must hold their claims back and say
so; once the operator clears ``synchronous_standby_names`` (as a failover manager does), every
job is recorded and each body has run once, but for a bounded few."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from ledgerq import LedgerQ
from ledgerq.store.engine import create_engine
from ledgerq.store.migrate import migrate
from ledgerq.store.tables import jobs
from tests.acceptance.conftest import Ledger, Procs
from tests.acceptance.failover_app import register
from tests.acceptance.private_servers import PrivatePostgres, streaming_pair
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(300)

APP = "tests.acceptance.failover_app:app"
JOBS = 1500
WORKERS = 2
CONCURRENCY = 4
#: Jobs a worker may hold at once: its slots and its prefetch (at most 4x the slots).
HELD_PER_WORKER = CONCURRENCY * 5
#: From the release of the stalled commits to every job succeeded.
RECOVERY_BOUND_SECONDS = 60.0


@pytest.fixture
def primary_and_standby() -> Iterator[tuple[PrivatePostgres, PrivatePostgres]]:
    with streaming_pair(sync=True) as servers:
        yield servers


def ledger_counts(url: str) -> dict[str, int]:
    engine = create_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            stmt = sa.select(jobs.c.state, sa.func.count()).group_by(jobs.c.state)
            return {state: count for state, count in conn.execute(stmt)}
    finally:
        engine.dispose()


def test_workers_hold_back_then_recover_after_a_synchronous_primary_switch(
    primary_and_standby: tuple[PrivatePostgres, PrivatePostgres],
    ledger: Callable[[str], Ledger],
    procs: Procs,
    tmp_path: Path,
) -> None:
    primary, standby = primary_and_standby
    hosts = f"host=127.0.0.1:{primary.port}&host=127.0.0.1:{standby.port}"
    url = f"postgresql://postgres@/ledger?{hosts}&target_session_attrs=read-write"
    standby_url = f"postgresql://postgres@127.0.0.1:{standby.port}/ledger"
    engine = create_engine(url)
    migrate(engine)
    engine.dispose()
    effects = ledger("postgresql")  # the effects live on the shared server, beside the pair
    env = {"TEST_EFFECTS_URL": effects.url}
    keys = [f"k{i:05d}" for i in range(JOBS)]
    producer = LedgerQ(database_url=url)
    try:
        register(producer).enqueue_many([(key,) for key in keys])
    finally:
        producer.close()
    workers = [
        procs.worker(url, "--concurrency", str(CONCURRENCY), env=env, app=APP)
        for _ in range(WORKERS)
    ]
    wait_until(lambda: effects.effect_count() >= JOBS * 0.3, timeout=120, what="30% done")
    primary.stop_immediately()
    standby.promote()
    promoted_at = time.monotonic()

    # The new primary's durable commits wait for a standby it does not have: the workers must
    # notice, stop claiming, and say so, while staying alive.
    logs = lambda: "".join(w.log() for w in workers)  # noqa: E731
    wait_until(
        lambda: logs().count("claims held back") >= WORKERS,
        timeout=30,
        what="every worker holding its claims back",
    )
    held = ledger_counts(standby_url)
    time.sleep(3.0)  # a window in which a worker that still claimed would claim hundreds
    later = ledger_counts(standby_url)
    assert later.get("running", 0) == held.get("running", 0), (held, later)
    assert later.get("queued", 0) > 0, f"every job was claimed though nothing was recorded: {later}"
    assert all(w.running() for w in workers), logs()
    print(f"\nwhile the commits waited: {later}, held back {time.monotonic() - promoted_at:.1f} s")

    # The operator's part of the switch: the new primary has no standby, so it must not wait
    # for one. Its waiting commits are released at once.
    standby.sql("ALTER SYSTEM SET synchronous_standby_names = ''")
    standby.sql("SELECT pg_reload_conf()")
    released_at = time.monotonic()
    wait_until(
        lambda: ledger_counts(standby_url) == {"succeeded": len(keys)},
        timeout=RECOVERY_BOUND_SECONDS,
        what="every job succeeded after the release",
        interval=0.2,
    )
    recovered = time.monotonic() - released_at
    assert "outcomes written; claiming again" in logs()
    assert set(effects.effect_rows()) == set(keys)
    duplicates = effects.duplicate_rows()
    print(f"recovered {recovered:.1f} s after the release; {len(duplicates)} body(ies) ran twice")
    # A claim does not wait for the standby, so the switch can lose the claims of jobs that
    # were held (running or prefetched): those bodies may run again, no others.
    assert len(duplicates) <= WORKERS * HELD_PER_WORKER, duplicates
    assert all(w.running() for w in workers)
