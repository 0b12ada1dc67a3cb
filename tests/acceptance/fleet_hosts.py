"""Several worker hosts on one machine: each a network namespace whose only way to the ledger's
PostgreSQL and to Redis is its own link, through a forwarder for each service
(``tests/acceptance/netns.py``). Cutting one host's link partitions that host alone.

``linked_hosts`` makes them and tears everything down even when the test fails: the processes
first (one may be cut off), then the forwarders (their upstream sessions end), then the links
and the namespaces.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

import sqlalchemy as sa

from tests.acceptance.conftest import Proc, Procs
from tests.acceptance.netns import Forwarder, IsolatedHost


def _address(url: str, default_port: int) -> tuple[str, int]:
    parsed = sa.make_url(url)
    return parsed.host or "127.0.0.1", parsed.port or default_port


class LinkedHost:
    """One namespaced host, named ``name``, with a forwarder to PostgreSQL and one to Redis
    on the root side of its link."""

    def __init__(self, name: str, host: IsolatedHost, postgres: Forwarder, redis: Forwarder):
        self.name = name
        self.host = host
        self.postgres = postgres
        self.redis = redis
        #: The worker processes started on this host, in order.
        self.workers: list[Proc] = []

    def database_url(self, url: str) -> str:
        """``url`` (a loopback PostgreSQL) as seen from inside this host."""
        through = sa.make_url(url).set(host=self.host.root_address, port=self.postgres.port)
        return through.render_as_string(hide_password=False)

    def redis_url(self, url: str) -> str:
        """``url`` (a loopback Redis) as seen from inside this host."""
        through = sa.make_url(url).set(host=self.host.root_address, port=self.redis.port)
        return through.render_as_string(hide_password=False)

    def start_worker(
        self, procs: Procs, url: str, redis_url: str, *args: str, env: dict[str, str], app: str
    ) -> Proc:
        """Start ``ledgerq worker start ARGS`` inside this host, on its forwarded database and
        Redis URLs, with ``FLEET_HOST`` naming the host and ``env`` added."""
        host_env = {**env, "LEDGERQ_REDIS_URL": self.redis_url(redis_url), "FLEET_HOST": self.name}
        proc = procs.worker(
            self.database_url(url), *args, env=host_env, app=app, prefix=self.host.prefix
        )
        self.workers.append(proc)
        return proc

    @property
    def pids(self) -> set[int]:
        """The process ids of this host's workers."""
        return {proc.pid for proc in self.workers}


@contextlib.contextmanager
def linked_hosts(
    procs: Procs, names: Sequence[str], postgres_url: str, redis_url: str
) -> Iterator[list[LinkedHost]]:
    """One ``LinkedHost`` per name, reaching ``postgres_url``'s and ``redis_url``'s servers
    (both on loopback). Skips (fails under ``CI=1``) where namespaces cannot be made."""
    made: list[IsolatedHost] = []
    forwarders: list[Forwarder] = []
    hosts: list[LinkedHost] = []
    try:
        for name in names:
            host = IsolatedHost.create(f"{os.getpid()}{name}")
            made.append(host)
            postgres = Forwarder(host.root_address, _address(postgres_url, 5432))
            forwarders.append(postgres)
            redis = Forwarder(host.root_address, _address(redis_url, 6379))
            forwarders.append(redis)
            hosts.append(LinkedHost(name, host, postgres, redis))
        yield hosts
    finally:
        procs.kill_all()
        for forwarder in forwarders:
            forwarder.close()
        for host in made:
            host.close()
