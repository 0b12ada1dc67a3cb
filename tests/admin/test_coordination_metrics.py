"""``workflows{state}`` and ``batches_open`` on ``/metrics``, read from the ledger at scrape
time, on every backend."""

from __future__ import annotations

from ledgerq import JobContext
from tests.admin.conftest import READ, Served


def sample(text: str, name: str) -> float:
    (line,) = [row for row in text.splitlines() if row.startswith(name + " ")]
    return float(line.split()[-1])


def test_workflows_by_state_and_open_batches(served: Served) -> None:
    app = served.app

    @app.task(name="work")
    def work(ctx: JobContext) -> None:
        return None

    text = served.client.get("/metrics", headers=READ).text
    assert sample(text, 'workflows{state="running"}') == 0.0
    assert sample(text, "batches_open") == 0.0

    flows = []
    for _ in range(2):
        flow = app.workflow("two")
        flow.step(work.s(), name="only")
        flows.append(flow.enqueue())
    app.batch([(work, ()), (work, ())])
    app.workflows.cancel(flows[0])

    text = served.client.get("/metrics", headers=READ).text
    assert sample(text, 'workflows{state="running"}') == 1.0
    assert sample(text, 'workflows{state="cancelled"}') == 1.0
    assert sample(text, 'workflows{state="succeeded"}') == 0.0
    assert sample(text, "batches_open") == 1.0
