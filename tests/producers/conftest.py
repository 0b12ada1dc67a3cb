"""The producers suite runs real workers and clients against the acceptance suite's ledgers."""

from tests.acceptance.conftest import ledger, procs

__all__ = ["ledger", "procs"]
