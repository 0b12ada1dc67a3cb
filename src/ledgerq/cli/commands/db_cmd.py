"""``ledgerq db migrate|status|stats``."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from ledgerq.cli.cli_context import CliContext, pass_cli


@click.group("db")
def group() -> None:
    """Create, upgrade and inspect the ledger's tables."""


@group.command("migrate")
@pass_cli
def migrate(cli: CliContext) -> int:
    """Create or upgrade the tables to the newest revision."""
    status = cli.app().migrate()
    if cli.as_json:
        cli.emit_json({"current": status.current, "head": status.head})
    else:
        cli.console.print(f"database at revision [bold]{status.current}[/] (newest: {status.head})")
    return 0


@group.command("status")
@pass_cli
def status(cli: CliContext) -> int:
    """Show the database's revision; exit 1 if a migration is pending."""
    state = cli.app().parts.migration_status()
    if cli.as_json:
        cli.emit_json(
            {"current": state.current, "head": state.head, "up_to_date": state.up_to_date}
        )
    else:
        verdict = (
            "up to date" if state.up_to_date else "migration pending: run `ledgerq db migrate`"
        )
        cli.console.print(f"revision {state.current or 'none'} of {state.head}: {verdict}")
    return 0 if state.up_to_date else 1


@group.command("stats")
@click.option(
    "--statements",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="How many of the slowest ledger statements to show.",
)
@pass_cli
def stats(cli: CliContext, statements: int) -> int:
    """Table sizes and row counts, dead rows, index use, the slowest ledger statements and
    connection use, as far as the database can tell (PostgreSQL: its statistics views and
    pg_stat_statements when installed; MariaDB/MySQL: information_schema and
    performance_schema when on; SQLite: dbstat and the file's pages). What it cannot tell is
    listed with the reason."""
    from ledgerq.store.db_stats import SqlDatabaseStats

    report = SqlDatabaseStats(cli.app().parts.store.engine).collect(statements=statements)
    if cli.as_json:
        cli.emit_json(report)
        return 0
    console = cli.console
    facts = [f"ledger tables {_bytes(report['ledger_bytes'])}"]
    for key, value in report["size"].items():
        shown = _bytes(value) if key.endswith("_bytes") else str(value)
        facts.append(f"{key.removesuffix('_bytes').replace('_', ' ')} {shown}")
    console.print(f"{report['database']} database: {', '.join(facts)}")
    console.print(_tables_table(report["tables"]))
    if report["indexes"]:
        table = Table("table", "index", "scans", "size", title="index use")
        for i in report["indexes"]:
            table.add_row(i["table"], i["index"], str(i["scans"]), _bytes(i["size_bytes"]))
        console.print(table)
    if report["statements"]:
        table = Table("mean ms", "calls", "total ms", "rows", "query", title="slowest statements")
        for st in report["statements"]:
            table.add_row(
                f"{st['mean_ms']:.3f}",
                str(st["calls"]),
                f"{st['total_ms']:.1f}",
                str(st["rows"]),
                escape(st["query"][:160]),
            )
        console.print(table)
    pool = report["pool"]
    console.print(f"this process's pool: {pool.get('checkedout')} of {pool.get('size')} in use")
    for name, value in report["connections"].items():
        console.print(f"connections {name.replace('_', ' ')}: {value}")
    for section, why in report["unavailable"].items():
        console.print(f"{section}: not available ({escape(why)})")
    return 0


def _tables_table(tables: dict[str, dict[str, Any]]) -> Table:
    table = Table("table", "rows", "data", "indexes", "dead rows", "free", title="tables")
    for name, t in sorted(tables.items()):
        table.add_row(
            name,
            str(t.get("rows", "")),
            _bytes(t.get("size_bytes")),
            _bytes(t.get("index_bytes")),
            str(t["dead_rows"]) if t.get("dead_rows") is not None else "",
            _bytes(t.get("free_bytes")),
        )
    return table


def _bytes(n: int | None) -> str:
    if n is None:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
