"""Example tasks for the compose deployment (replace with your own; LEDGERQ_APP=tasks:app)."""

from ledgerq import JobContext, LedgerQ

app = LedgerQ()


@app.task(queue="default")
def hello(ctx: JobContext, name: str) -> str:
    """Say hello; enqueue with POST /api/v1/jobs {"task": "tasks.hello", "args": ["you"]}."""
    return f"hello {name}"
