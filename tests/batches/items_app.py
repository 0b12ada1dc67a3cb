"""The application the batch acceptance tests run in real worker processes.

``items.process`` walks ``total`` items with ``ctx.items()``; each item's effect (a row in
``item_effects``, deliberately without a unique key so a duplicate would show) is written in
the same transaction as ``ctx.item_done(key, tx=...)``. Every key handed to an attempt is
appended to ``<log_dir>/attempt-<n>.log`` before it is processed, so a test can tell which
items each attempt was given (an append survives SIGKILL).

The test creates ``item_effects`` (``metadata.create_all``); the database comes from
``LEDGERQ_DATABASE_URL``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from ledgerq import JobContext, LedgerQ
from tests.acceptance.effects_app import effects_engine

metadata = sa.MetaData()

item_effects = sa.Table(
    "item_effects",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("item_key", sa.String(100), nullable=False),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
)

PROCESS = "items.process"
QUEUE = "items"


def item_keys(total: int) -> list[str]:
    """The keys of a run of ``total`` items."""
    return [f"item-{i:05d}" for i in range(total)]


def make_app(**overrides: Any) -> LedgerQ:
    """A LedgerQ with the batch-item task; ``overrides`` are settings."""
    app = LedgerQ(**overrides)
    url = app.settings.database_url.get_secret_value()

    @app.task(name=PROCESS, queue=QUEUE, max_attempts=5)
    def process(ctx: JobContext, total: int, log_dir: str, chunk: int, pause: float) -> int:
        """Write one effect row per item, exactly once, ``chunk`` items per transaction
        (``chunk=1``: ``item_done`` per item), pausing ``pause`` seconds after each."""
        engine = effects_engine(url)
        log = os.open(
            Path(log_dir) / f"attempt-{ctx.attempt}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND
        )
        try:
            for keys in ctx.item_chunks(item_keys(total), chunk):
                os.write(log, "".join(f"{key}\n" for key in keys).encode())
                rows = [{"item_key": k, "job_id": ctx.job_id, "attempt": ctx.attempt} for k in keys]
                with engine.begin() as conn:
                    conn.execute(item_effects.insert(), rows)
                    if chunk == 1:
                        ctx.item_done(keys[0], tx=conn)
                    else:
                        ctx.items_done(keys, tx=conn)
                time.sleep(pause)
        finally:
            os.close(log)
        return total

    return app


app = make_app()
