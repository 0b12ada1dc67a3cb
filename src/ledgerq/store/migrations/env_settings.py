"""Names and filters the migration environment, migrate.py and the migration tests share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

VERSION_TABLE = "ledgerq_alembic_version"


def include_object_for(dialect_name: str) -> Callable[..., bool]:
    """An Alembic ``include_object`` hook that skips indexes declared for other dialects
    (``Index.ddl_if(dialect=...)``) so autogenerate compares like with like."""

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if type_ == "table" and name == "sqlite_sequence":
            return False  # SQLite's own bookkeeping of AUTOINCREMENT keys
        condition = getattr(obj, "_ddl_if", None)
        if type_ == "index" and condition is not None and condition.dialect is not None:
            dialects = condition.dialect
            dialects = (dialects,) if isinstance(dialects, str) else tuple(dialects)
            return dialect_name in dialects
        return True

    return include
