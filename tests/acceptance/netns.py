"""A network namespace of its own for one process, and a partition of its link.

``IsolatedHost`` makes a namespace joined to the root namespace by a veth pair on a private
/30 (nothing is routed anywhere else), and ``Forwarder`` relays TCP from the root-side address
of that pair to a loopback service (the shared PostgreSQL listens on 127.0.0.1 only). A
process started with ``IsolatedHost.prefix`` (``ip netns exec NAME``) reaches the service only
through the forwarder, so ``cut()`` (the root-side link down) partitions it: its packets are
dropped, not refused or reset, as on a real cut link, and its TCP connections survive the cut
and carry on after ``heal()``.

Only root can make namespaces: ``IsolatedHost.create`` skips the test otherwise, and also when
``ip netns add`` fails, except under ``CI=1``, where a root that cannot make one fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator

import pytest

#: The /30s tried for the veth pair, first free one wins (RFC 1918, never routed).
SUBNETS = list(ipaddress.ip_network("10.213.77.0/24").subnets(new_prefix=30))
#: Held while a /30 is chosen and taken (see ``IsolatedHost.create``).
LOCK_PATH = "/tmp/ledgerq-netns.lock"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    with open(LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = _ip("-o", "-4", "addr", "show").stdout
    nets = []
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            nets.append(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    return nets


class IsolatedHost:
    """A namespace ``name`` whose only link is a veth pair to the root namespace:
    ``root_address`` on the root side, ``address`` inside."""

    def __init__(self, tag: str) -> None:
        self.name = f"lq-{tag}"
        self.root_link = f"lq{tag}r"[:15]
        self.link = f"lq{tag}n"[:15]
        used = _used_networks()
        subnet = next((s for s in SUBNETS if not any(s.overlaps(u) for u in used)), None)
        if subnet is None:
            raise RuntimeError("no free /30 in 10.213.77.0/24 for the veth pair")
        root_host, inner_host = list(subnet.hosts())
        self.root_address = str(root_host)
        self.address = str(inner_host)
        self._prefix_len = subnet.prefixlen
        self._made_namespace = False
        self._made_link = False

    @classmethod
    def create(cls, tag: str) -> IsolatedHost:
        """Make the namespace and its link, or skip the test (see the module's docstring)."""
        if os.geteuid() != 0:
            pytest.skip("network namespaces need root (ip netns add)")
        host: IsolatedHost | None = None
        try:
            if shutil.which("ip") is None:
                raise RuntimeError("the ip command (iproute2) is not installed")
            # Choosing a free /30 and taking it is one step for every test on the machine
            # (other pytest processes make namespaces too): two that read the addresses at
            # once would both take the first free /30, and their routes would collide.
            with _subnet_lock():
                host = cls(tag)
                host._setup()
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            if host is not None:
                host.close()
            detail = getattr(exc, "stderr", "") or exc
            message = f"cannot make a network namespace: {detail}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        return host

    def _setup(self) -> None:
        _ip("netns", "add", self.name)
        self._made_namespace = True
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", self.link)
        self._made_link = True
        _ip("link", "set", self.link, "netns", self.name)
        _ip("addr", "add", f"{self.root_address}/{self._prefix_len}", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")
        inside = ("netns", "exec", self.name, "ip")
        _ip(*inside, "addr", "add", f"{self.address}/{self._prefix_len}", "dev", self.link)
        _ip(*inside, "link", "set", self.link, "up")
        _ip(*inside, "link", "set", "lo", "up")

    @property
    def prefix(self) -> tuple[str, ...]:
        """The command prefix that runs a program inside the namespace."""
        return ("ip", "netns", "exec", self.name)

    def cut(self) -> None:
        """Take the root side of the link down: every packet either way is dropped."""
        _ip("link", "set", self.root_link, "down")

    def heal(self) -> None:
        """Bring the link back up; connections cut off resume with their next retransmit."""
        _ip("link", "set", self.root_link, "up")

    def close(self) -> None:
        """Delete the link (both ends) and the namespace; safe to call more than once."""
        if self._made_link:
            _ip("link", "del", self.root_link, check=False)
            self._made_link = False
        if self._made_namespace:
            _ip("netns", "del", self.name, check=False)
            self._made_namespace = False


class Forwarder:
    """Relays every TCP connection accepted on ``(host, port)`` to ``target``, from an asyncio
    loop on a thread of its own (``port`` 0: a free one, read it from ``.port``)."""

    def __init__(self, host: str, target: tuple[str, int], port: int = 0) -> None:
        self._target = target
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tcp-forwarder", daemon=True
        )
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accept, host, port), self._loop
        )
        try:
            self._server = future.result(10)
        except BaseException:
            self._stop_loop()
            raise
        self.port = int(self._server.sockets[0].getsockname()[1])
        self.connections = 0
        #: Local ports of the relayed connections to ``target``: the service sees its clients
        #: as these (PostgreSQL's ``pg_stat_activity.client_port``).
        self.upstream_ports: set[int] = set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            self._writers.discard(writer)
            return
        self._writers.add(up_writer)
        up_port = int(up_writer.get_extra_info("sockname")[1])
        self.upstream_ports.add(up_port)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        self.upstream_ports.discard(up_port)
        self._writers.discard(writer)
        self._writers.discard(up_writer)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _shutdown(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def close(self) -> None:
        """Stop listening and drop every relayed connection."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._stop_loop()
