"""The backup runbook (docs/operations.md) names every table of the ledger, in its table and
in both dump commands, so a backup taken by it restores the whole ledger."""

from __future__ import annotations

import re
from pathlib import Path

from ledgerq.store.tables import metadata

RUNBOOK = Path(__file__).parents[2] / "docs" / "operations.md"


def _section() -> str:
    text = RUNBOOK.read_text()
    start = text.index("### Backup and restore of the queue tables")
    return text[start : text.index("\n### ", start + 1)]


def test_the_backup_runbook_lists_every_table() -> None:
    section = _section()
    tables = [*metadata.tables, "ledgerq_alembic_version"]
    listed = set(re.findall(r"^\| (.+?) \|", section, flags=re.MULTILINE))
    named = {name.strip("` ") for row in listed for name in row.split(",")}
    assert not set(tables) - named, "tables missing from the runbook's table"
    for tool in ("pg_dump", "mysqldump"):
        command = section[section.index(tool) :].split("\n#", 1)[0]
        missing = [t for t in tables if not re.search(rf"\b{t}\b", command)]
        assert not missing, f"{tool} misses {missing}"
