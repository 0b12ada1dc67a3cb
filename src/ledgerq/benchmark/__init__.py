"""``ledgerq bench``: ledgerq and its peers on the same workloads, measured by the peers' own
harness in one invocation, so every comparison is a ratio taken on one machine at one time."""

from __future__ import annotations

from ledgerq.core import errors


class BenchError(errors.LedgerqError):
    """The benchmark cannot run as asked (bad option, service down, missing extra)."""
