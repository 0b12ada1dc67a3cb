"""``workflows{state}`` and ``batches_open``: workflows and batches of jobs in the ledger, read
at scrape time (their step and member jobs are counted by the job metrics)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ledgerq.core import errors

#: Every state a workflow can be in, so each has a sample even at zero.
WORKFLOW_STATES = ("running", "succeeded", "failed", "cancelled")


class CoordinationCollector(Collector):
    """Reads the counts on each scrape; a failing read exposes no samples, not an error (the
    ledger's other gauges report the outage)."""

    def __init__(
        self,
        workflow_states: Callable[[], Mapping[str, int]],
        open_batches: Callable[[], int],
    ) -> None:
        self._workflow_states = workflow_states
        self._open_batches = open_batches

    def collect(self) -> Iterable[Metric]:
        """One sample per workflow state, and the number of unfinished batches."""
        try:
            states = self._workflow_states()
            batches = self._open_batches()
        except errors.StoreError:
            return
        workflows = GaugeMetricFamily(
            "workflows", "Workflows in the ledger by state.", labels=["state"]
        )
        for state in WORKFLOW_STATES:
            workflows.add_metric([state], states.get(state, 0))
        yield workflows
        yield GaugeMetricFamily(
            "batches_open", "Batches of jobs whose members have not all finished.", batches
        )
