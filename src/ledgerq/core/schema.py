"""Where a ledger's tables stand against the migrations this ledgerq knows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """Where a database stands: its revision and the newest one this ledgerq knows."""

    current: str | None
    head: str

    @property
    def up_to_date(self) -> bool:
        """Whether no migration is pending."""
        return self.current == self.head
