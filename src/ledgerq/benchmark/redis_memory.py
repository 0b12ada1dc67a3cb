"""Redis memory per queued job id, measured through ledgerq's own ``RedisTransport.push``:
``python -m ledgerq.benchmark.redis_memory REDIS_URL [IDS]`` pushes IDS ids (default one
million) into one queue of an empty Redis database, prints INFO memory's growth and the
queue key's MEMORY USAGE as one JSON line, then deletes what it wrote.

It refuses a database that holds keys: its growth would be mixed with theirs. Use a private
``redis-server`` (``redis-server --port 6391 --save ''``) or an empty database number.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import redis

from ledgerq.benchmark import BenchError
from ledgerq.core.job import JobHint
from ledgerq.transport.redis import RedisTransport

#: Ids per ``push`` call (one pipeline each), as a producer's ``enqueue_many`` of 10,000.
PUSH_BATCH = 10_000
NAMESPACE = "ledgerq-memory"
QUEUE = "default"


def measure(url: str, ids: int, first_id: int = 1) -> dict[str, Any]:
    """Push ``ids`` job ids into one queue of the empty database at ``url``; the memory they
    take (bytes, and MiB per million). Raises ``BenchError`` if the database holds keys."""
    raw: Any = redis.Redis.from_url(url)  # redis-py types its sync replies as maybe-awaitable
    transport = RedisTransport(url, namespace=NAMESPACE)
    try:
        if raw.dbsize():
            raise BenchError(f"{url} holds keys: measure in an empty Redis database")
        before = int(raw.info("memory")["used_memory"])
        started = time.perf_counter()
        for low in range(first_id, first_id + ids, PUSH_BATCH):
            high = min(low + PUSH_BATCH, first_id + ids)
            transport.push([JobHint(job_id, QUEUE, 0) for job_id in range(low, high)])
        seconds = time.perf_counter() - started
        key = transport.key(QUEUE)
        grown = int(raw.info("memory")["used_memory"]) - before
        result = {
            "ids": int(raw.zcard(key)),
            "encoding": raw.object("encoding", key).decode(),
            "used_memory_growth_bytes": grown,
            "key_memory_usage_bytes": int(raw.memory_usage(key, samples=0) or 0),
            "bytes_per_id": round(grown / ids, 1),
            "mib_per_million_ids": round(grown / ids * 1_000_000 / 2**20, 1),
            "push_seconds": round(seconds, 2),
            "redis_version": raw.info("server")["redis_version"],
        }
        raw.delete(key)
        return result
    finally:
        transport.close()
        raw.close()


def main(argv: list[str]) -> int:
    """``REDIS_URL [IDS]``: print the measurement as one JSON line."""
    if not 1 <= len(argv) <= 2 or (len(argv) == 2 and not argv[1].isdigit()):
        print("usage: python -m ledgerq.benchmark.redis_memory REDIS_URL [IDS]", file=sys.stderr)
        return 2
    try:
        found = measure(argv[0], int(argv[1]) if len(argv) == 2 else 1_000_000)
    except (BenchError, redis.RedisError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
