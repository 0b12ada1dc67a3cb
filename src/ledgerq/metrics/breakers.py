"""``circuit_breaker_state{name}``: every circuit breaker's state, read from the ledger at
scrape time (0 closed, 1 half-open, 2 open)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ledgerq.core import errors
from ledgerq.core.limits import GAUGE, Circuit


class BreakerCollector(Collector):
    """Reads the breakers on each scrape; a failing read exposes no samples, not an error."""

    def __init__(self, list_breakers: Callable[[], Iterable[Circuit]]) -> None:
        self._list = list_breakers

    def collect(self) -> Iterable[Metric]:
        """One gauge sample per breaker."""
        gauge = GaugeMetricFamily(
            "circuit_breaker_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
            labels=["name"],
        )
        try:
            circuits = list(self._list())
        except errors.StoreError:
            circuits = []  # the ledger's other gauges report the outage
        for circuit in circuits:
            gauge.add_metric([circuit.name], GAUGE[circuit.state])
        yield gauge
