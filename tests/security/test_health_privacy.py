"""Anonymous health answers say ok or not, nothing more; the details (driver errors with host
and port, migration revisions, Redis) go to read and admin callers; readiness is cached for
about a second, so hammering the probe does not cost a database round trip each
(issue 22, item 4)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ledgerq.core.operations import HealthProbe, ProbeResult
from tests.admin.conftest import ADMIN, READ, Served, serve

NOWHERE = "postgresql://postgres@127.0.0.1:1/nowhere"


def test_anonymous_readiness_reveals_nothing_but_ok_or_not() -> None:
    for served in serve(NOWHERE):
        for path in ("/health/ready", "/health"):
            anonymous = served.client.get(path)
            assert anonymous.status_code == 503
            assert anonymous.json() == {"status": "fail", "checks": {}}, anonymous.text
            assert "127.0.0.1" not in anonymous.text and "nowhere" not in anonymous.text
            wrong = served.client.get(path, headers={"Authorization": "Bearer wrong"})
            assert wrong.json() == {"status": "fail", "checks": {}}
            for caller in (READ, ADMIN):
                detailed = served.client.get(path, headers=caller)
                assert detailed.status_code == 503
                database = detailed.json()["checks"]["database"]
                assert database["ok"] is False and database["detail"]


class CountingProbe:
    """A probe that counts its checks (each would be a database round trip)."""

    def __init__(self, inner: HealthProbe) -> None:
        self.name = inner.name
        self._inner = inner
        self.calls = 0
        self._lock = threading.Lock()

    def check(self) -> ProbeResult:
        with self._lock:
            self.calls += 1
        return self._inner.check()


def test_hammered_readiness_is_cached(make_database_url: Callable[[str], str]) -> None:
    for served in serve(make_database_url("sqlite")):
        counting = _count_probes(served)
        began = time.monotonic()
        for _ in range(200):
            assert served.client.get("/health/ready").status_code == 200
        elapsed = time.monotonic() - began
        most = int(elapsed) + 2  # one check per second of hammering, plus a boundary
        for probe in counting:
            assert probe.calls <= most, f"{probe.name}: {probe.calls} checks in {elapsed:.1f} s"
        assert served.client.get("/health/ready", headers=READ).json()["checks"]["database"]["ok"]


def _count_probes(served: Served) -> list[CountingProbe]:
    deps = served.http.state.deps
    counting = [CountingProbe(p) for p in deps.probes]
    deps.probes = counting
    return counting
