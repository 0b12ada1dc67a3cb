"""``db_connection_pool_*``: one process's SQLAlchemy connection pool, read at scrape time
(every worker's own endpoint and ``serve``'s), under SPEC 8's names and in their style."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ledgerq.core.operations import PoolUse


class PoolCollector(Collector):
    """``db_connection_pool_active`` (checked out), ``db_connection_pool_max`` (most it hands
    out: size + overflow allowed), ``db_connection_pool_size`` and
    ``db_connection_pool_overflow`` (open beyond the size now). Alert on active / max."""

    def __init__(self, read: Callable[[], PoolUse]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        """One reading of the pool."""
        use = self._read()
        yield GaugeMetricFamily(
            "db_connection_pool_active",
            "Connections of this process's pool in use now (not those kept idle between"
            " hot-path statements).",
            use.checked_out,
        )
        yield GaugeMetricFamily(
            "db_connection_pool_max",
            "Most connections this process's pool hands out (size + allowed overflow).",
            use.most,
        )
        yield GaugeMetricFamily(
            "db_connection_pool_size", "Connections this process's pool keeps.", use.size
        )
        yield GaugeMetricFamily(
            "db_connection_pool_overflow",
            "Connections open beyond the pool's size now.",
            use.overflow,
        )
