"""Redis under Sentinel, and Redis Cluster refused, with real servers the tests start on their
own ports. Worker processes on a ``redis+sentinel://`` URL drain jobs while the master is
SIGKILLed; the sentinels promote the replica, the workers follow it, and the ledger shows every
job run exactly once, including jobs whose ids were only on the dead master."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from ledgerq.core.job import JobHint
from ledgerq.transport import wire
from ledgerq.transport.redis import RedisTransport
from tests.acceptance import effects_app
from tests.acceptance.conftest import Ledger, Procs
from tests.helpers import wait_until
from tests.redis_sentinel import SentinelSet
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.timeout(180)

Make = Callable[[str], Ledger]
NAMESPACE = "sentinel"
PASSWORD = "S3ntinel-pw"
#: Seconds from the master's death until every worker takes ids from the new master again:
#: the sentinels' down-after (1 s here) and election and promotion (about 1-2 s), then the
#: worker's next probe of Redis (its backoff doubles from 0.5 s up to 5 s). docs/operations.md.
FOLLOW_BOUND_SECONDS = 15.0


def succeeded(db: Ledger) -> int:
    return db.states().get("succeeded", 0)


def blocked_pops(client: redis.Redis) -> int:
    """Connections blocked in BZMPOP on this server (one per idle worker)."""
    clients: list[dict[str, Any]] = client.client_list()
    return sum(1 for c in clients if c.get("cmd") == "bzmpop" and "b" in c.get("flags", ""))


def pops_served(client: redis.Redis) -> int:
    """BZMPOP and ZMPOP calls this server answered since it started."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("bzmpop", "zmpop"))


def test_workers_follow_a_sentinel_failover_and_lose_no_job(
    ledger: Make, procs: Procs, tmp_path: Path
) -> None:
    (tmp_path / "sentinel").mkdir()
    deployment = SentinelSet(tmp_path / "sentinel", password=PASSWORD)
    try:
        run_failover(ledger, procs, deployment)
    finally:
        procs.kill_all()
        deployment.stop()


def run_failover(ledger: Make, procs: Procs, deployment: SentinelSet) -> None:
    db = ledger("postgresql")
    url = deployment.url()
    producer = effects_app.make_app(database_url=db.url, redis_url=url, namespace=NAMESPACE)
    client = producer.app.client
    before = [f"a{i:04d}" for i in range(2000)]
    producer.slow.enqueue_many([(k, 0.02) for k in before])
    assert client.flush_hints(10)
    assert client.unannounced == 0  # pushed to the master the sentinels named
    env = {
        "LEDGERQ_REDIS_URL": url,
        "LEDGERQ_NAMESPACE": NAMESPACE,
        "LEDGERQ_RECONCILE_INTERVAL": "1",
        "LEDGERQ_REQUEUE_AFTER": "2",
    }
    workers = [procs.worker(db.url, "--concurrency", "8", env=env) for _ in range(2)]
    deployment.wait_ready()
    wait_until(lambda: succeeded(db) >= 400, timeout=60, what="400 jobs done")

    # Asynchronous replication loses what the replica has not received yet. Make that certain
    # for a batch: cut the replica off (it cannot log in again), push the batch's ids to the
    # master alone, then kill the master. Their jobs are only in the ledger now.
    lost = [f"l{i:03d}" for i in range(200)]
    lost_ids = [r.job_id for r in db.effects.slow.enqueue_many([(k, 0.02) for k in lost])]
    with deployment.master.client() as master:
        master.config_set("requirepass", "not-the-replicas-password")
        master.client_kill_filter(_type="slave")
        pusher = RedisTransport("unused", namespace=NAMESPACE, client=master)
        pusher.push([JobHint(job_id, "default", 0) for job_id in lost_ids])
        deployment.master.kill()
    killed_at = time.monotonic()
    assert deployment.replica is not None
    with deployment.replica.client() as replica:
        members = [wire.encode_member(job_id) for job_id in lost_ids]
        assert replica.zmscore(f"{NAMESPACE}:0:queue:default", members) == [None] * len(lost)

    # Enqueues go on while there is no master: pushes fail fast and are skipped; the jobs
    # are in the ledger, and the reconciler sends their ids once Redis answers.
    during = [f"d{i:03d}" for i in range(200)]
    producer.slow.enqueue_many([(k, 0.02) for k in during])
    assert client.flush_hints(10)
    assert client.unannounced == len(during)

    new_port = deployment.replica.port
    wait_until(lambda: deployment.master_port() == {new_port}, timeout=20, what="promotion")
    promoted_after = time.monotonic() - killed_at
    for worker in workers:
        wait_until(
            lambda w=worker: "back to the redis driver" in w.log(),
            timeout=FOLLOW_BOUND_SECONDS - (time.monotonic() - killed_at),
            what="the worker taking ids from the new master",
        )
    followed_after = time.monotonic() - killed_at

    # The producer's pushes reach the new master too (its probe backoff ends first).
    after: list[str] = []

    def pushed_again() -> bool:
        after.append(f"p{len(after):03d}")
        producer.slow.enqueue(after[-1], 0.02)
        return client.flush_hints(10) and client.unannounced == len(during) + len(after) - 1

    wait_until(pushed_again, timeout=FOLLOW_BOUND_SECONDS, what="the producer pushing again")
    with deployment.replica.client() as new_master:
        served_before = pops_served(new_master)
        batch = [f"b{i:03d}" for i in range(300)]
        producer.slow.enqueue_many([(k, 0.02) for k in batch])
        assert client.flush_hints(10)
        assert client.unannounced == len(during) + len(after) - 1  # all sent to the new master
        everything = {*before, *lost, *during, *after, *batch}
        wait_until(lambda: succeeded(db) == len(everything), timeout=60, what="all jobs done")
        done_after = time.monotonic() - killed_at
        # Taken from the new master: it answers the workers' pops, which empty its queue
        # (ids of jobs claimed while the workers polled are popped and dropped), and each
        # idle worker is blocked in a pop on it.
        assert pops_served(new_master) > served_before
        key = f"{NAMESPACE}:0:queue:default"
        wait_until(lambda: new_master.zcard(key) == 0, timeout=10, what="the new master drained")
        wait_until(lambda: blocked_pops(new_master) >= 2, timeout=10, what="both workers popping")
    print(
        f"promoted {promoted_after:.1f} s, workers on the new master {followed_after:.1f} s,"
        f" all {len(everything)} jobs done {done_after:.1f} s after the master was killed"
    )
    producer.app.close()
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.log()[-3000:]
    assert db.failures() == {}
    assert set(db.effect_rows()) == everything
    assert db.duplicate_rows() == []
    started = [key for key, _job, _attempt in db.start_rows()]
    assert sorted(started) == sorted(everything)  # no body ran twice
    assert {row.attempt for row in db.jobs().values()} == {1}
    assert PASSWORD not in "".join(w.log() for w in workers)


def test_a_redis_cluster_is_refused_with_the_reason(
    ledger: Make, procs: Procs, tmp_path: Path
) -> None:
    db = ledger("sqlite")
    (tmp_path / "cluster").mkdir()
    node = RedisServer(
        tmp_path / "cluster",
        *("--cluster-enabled", "yes", "--cluster-config-file", str(tmp_path / "nodes.conf")),
        # The cluster bus port defaults to the port + 10000, past 65535 for a high free port.
        *("--cluster-port", str(free_port())),
    )
    try:
        with node.client() as raw:
            raw.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
            wait_until(lambda: raw.cluster("info")["cluster_state"] == "ok", what="cluster up")
            # The reason, shown on the real cluster: one pop over two queues crosses slots.
            with pytest.raises(redis.ResponseError, match="same slot"):
                raw.zmpop(2, ["c:0:queue:a", "c:0:queue:b"], min=True)
        env = {"LEDGERQ_REDIS_URL": node.url, "LEDGERQ_NAMESPACE": "c"}
        refused = procs.run(db.url, "worker", "start", "--burst", env=env)
        assert refused.returncode == 1
        assert "error: Redis Cluster is not supported" in refused.stderr
        assert "BZMPOP" in refused.stderr and "Traceback" not in refused.stderr
    finally:
        node.stop()
    by_scheme = procs.run(
        db.url, "worker", "start", "--burst", env={"LEDGERQ_REDIS_URL": "redis+cluster://h:7000"}
    )
    assert by_scheme.returncode != 0
    assert "Redis Cluster is not supported" in by_scheme.stderr
    assert "Traceback" not in by_scheme.stderr
