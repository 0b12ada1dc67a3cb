"""docs/coordination.md's fenced write, word for word through the public API: ``app.lock``,
``app.engine`` and ``LeaseLost``, all from ``ledgerq`` (no internal import), on each database."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from ledgerq import LeaseLost, LedgerQ
from tests.helpers import wait_until

notes = sa.Table(
    "fenced_notes", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True, autoincrement=True)
)


def test_a_guarded_write_on_app_engine_applies_and_a_lost_lock_is_refused(
    database_url: str,
) -> None:
    app = LedgerQ(database_url=database_url)
    try:
        app.migrate()
        notes.create(app.engine, checkfirst=True)
        with app.lock("nightly-report", ttl=0.5) as lock:
            with app.engine.begin() as conn:
                lock.guard(conn)
                conn.execute(notes.insert())
            # Once it expired, a newer holder takes the lock over: the old one is refused.
            wait_until(
                lambda: app.locks.acquire("nightly-report", ttl=30, owner="other"),
                timeout=10,
                what="another owner takes the expired lock",
            )
            with pytest.raises(LeaseLost), app.engine.begin() as conn:
                lock.guard(conn)
                conn.execute(notes.insert())
        with app.engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(notes)).scalar_one() == 1
    finally:
        app.close()
