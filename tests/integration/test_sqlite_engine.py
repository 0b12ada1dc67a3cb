"""SQLite's write lock (store/engine.py): a transaction whose connection was invalidated (a
KeyboardInterrupt during a query does that) still ends cleanly and releases the lock."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ledgerq.store.engine import READ_ONLY_OPTION, create_engine


@pytest.mark.parametrize("read_only", [True, False])
def test_an_invalidated_transaction_ends_without_error_and_frees_the_write_lock(
    tmp_path: Path, read_only: bool
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        options = {READ_ONLY_OPTION: True} if read_only else {}
        # What a Ctrl-C during a query does: SQLAlchemy invalidates the connection, and the
        # KeyboardInterrupt rolls the transaction back on its way out. It must arrive as is.
        with pytest.raises(KeyboardInterrupt), engine.connect() as plain:
            conn = plain.execution_options(**options)
            with conn.begin():
                conn.exec_driver_sql("SELECT 1")
                conn.invalidate()
                raise KeyboardInterrupt
        # Another thread can take the write lock (it would wait forever if it leaked).
        wrote = threading.Event()

        def write() -> None:
            with engine.begin() as other:
                other.exec_driver_sql("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
            wrote.set()

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        assert wrote.wait(10), "the write lock was never released"
    finally:
        engine.dispose()
