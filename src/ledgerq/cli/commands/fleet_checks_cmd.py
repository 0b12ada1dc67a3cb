"""``ledgerq worker validate-pool|validate-config|export-config|resource-stats`` and
``ledgerq queue cleanup-health-checks|cleanup-failover-events|cleanup-orphaned-assignments``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import click

from ledgerq.cli import worker_checks
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.commands import spool_cmd
from ledgerq.cli.commands.fleet_cmd import admin
from ledgerq.config.settings import ENV_PREFIX, Settings
from ledgerq.core import errors
from ledgerq.core.unserved import UnservedWork

if TYPE_CHECKING:
    from ledgerq.app.application import LedgerQ

#: Connections one worker process may hold at once besides its tasks' own: fetcher,
#: completer, heartbeater, registrar, lifeline, stager, janitor, listener.
WORKER_SERVICE_CONNECTIONS = 8


def _report(
    cli: CliContext,
    problems: list[str],
    facts: Mapping[str, object],
    warnings: Sequence[UnservedWork] = (),
) -> int:
    """Print the facts, the warnings and the problems (or ``ok``); exit 1 on a problem only."""
    if cli.as_json:
        shown = [w.as_dict() for w in warnings]
        cli.emit_json({"ok": not problems, "problems": problems, "warnings": shown, **facts})
    else:
        for name, value in facts.items():
            click.echo(f"{name}: {value}")
        for work in warnings:
            click.echo(f"warning: {work.describe()}")
        click.echo("ok" if not problems else "\n".join(f"problem: {p}" for p in problems))
    return 0 if not problems else 1


@click.command("validate-pool")
@pass_cli
def validate_pool(cli: CliContext) -> int:
    """Check the database connection pool against what the fleet needs: exit 1 if a worker's
    pool is too small for its services or the fleet could exhaust the server's limit."""
    settings = cli.app().settings
    store = admin(cli)
    probe = store.probe_database()
    workers = store.list_workers()
    problems = []
    if settings.db_pool_size * 2 < WORKER_SERVICE_CONNECTIONS:
        problems.append(
            f"DB_POOL_SIZE {settings.db_pool_size} (x2 with overflow) is below the"
            f" {WORKER_SERVICE_CONNECTIONS} connections a worker's services may hold"
        )
    per_worker = _server_connections_per_worker(settings)
    demand = max(len(workers), 1) * per_worker
    limit = probe["max_connections"]
    if isinstance(limit, int) and demand > limit:
        problems.append(
            f"{max(len(workers), 1)} worker(s) x {per_worker} connections"
            f" = {demand} exceeds the server's max_connections {limit}"
        )
    facts = {**probe, "active_workers": len(workers), "fleet_connection_demand": demand}
    return _report(cli, problems, facts)


def _server_connections_per_worker(settings: Settings) -> int:
    """Server connections one worker process may open: its pool with overflow; behind
    PgBouncer only its direct LISTEN connection (the pooler's own pool, ``default_pool_size``,
    bounds the rest whatever the number of workers)."""
    if settings.db_pooler == "none":
        return settings.db_pool_size * 2
    return 0 if settings.database_direct_url is None else 1


def config_problems(settings: Settings) -> list[str]:
    """Settings that each validate alone but do not work together."""
    problems = []
    if settings.worker_ttl < 2 * settings.heartbeat_interval:
        problems.append(
            f"WORKER_TTL {settings.worker_ttl:g} s should be at least twice HEARTBEAT_INTERVAL"
            f" {settings.heartbeat_interval:g} s, or one late heartbeat fails a worker over"
        )
    if settings.failover_check_interval > settings.worker_ttl:
        problems.append(
            f"FAILOVER_CHECK_INTERVAL {settings.failover_check_interval:g} s exceeds"
            f" WORKER_TTL {settings.worker_ttl:g} s: failover would lag behind the TTL"
        )
    if settings.worker_ttl + settings.failover_check_interval >= 30:
        problems.append("WORKER_TTL + FAILOVER_CHECK_INTERVAL should stay well under 30 s")
    if settings.stuck_after <= settings.worker_ttl:
        problems.append("STUCK_AFTER should be longer than WORKER_TTL")
    return problems


@click.command("validate-config")
@click.option(
    "--queues",
    "-q",
    help="Comma-separated queues the workers of this configuration consume (default:"
    " LEDGERQ_QUEUES).",
)
@pass_cli
def validate_config(cli: CliContext, queues: str | None) -> int:
    """Check the settings (each one is validated at start; this checks how they fit
    together), that the database is reachable and migrated, and that the enqueue spool (if
    LEDGERQ_SPOOL is on) can be written. Exit 1 on any problem. With an
    application (--app or LEDGERQ_APP), also warn (exit 0) of each task or schedule whose
    queue neither --queues nor any live worker of the fleet consumes: its jobs would wait."""
    app = cli.app()
    problems = config_problems(app.settings)
    try:
        state = app.parts.migration_status()
        if not state.up_to_date:
            problems.append(f"database at revision {state.current}, newest {state.head}: migrate")
    except errors.StoreError as exc:
        problems.append(str(exc))
    problems += spool_cmd.spool_problems(cli)
    problems.extend(_replica_problems(app))
    own = Settings._split_queues(queues) if queues else app.settings.queues
    facts = {
        "failover_within_seconds": app.settings.worker_ttl + app.settings.failover_check_interval,
        "database": worker_checks.database_shown(app),
        "queues": ",".join(own),
        "tasks": len(app.registry),
    }
    return _report(cli, problems, facts, worker_checks.unserved_work(app, own))


def _replica_problems(app: LedgerQ) -> list[str]:
    """The read replica (``DATABASE_READ_URL``) must answer and hold the ledger's revision."""
    try:
        state = app.parts.replica_migration_status()
    except errors.StoreError as exc:
        return [f"read replica: {exc}"]
    if state is not None and not state.up_to_date:
        return [f"read replica at revision {state.current}, newest {state.head}"]
    return []


@click.command("export-config")
@pass_cli
def export_config(cli: CliContext) -> int:
    """Print the effective settings as LEDGERQ_* lines (or JSON), secrets masked."""
    shown = cli.app().settings.masked()
    if cli.as_json:
        cli.emit_json(shown)
        return 0
    for name, value in shown.items():
        if value is None:
            continue
        text = ",".join(value) if isinstance(value, list) else str(value)
        click.echo(f"{ENV_PREFIX}{name.upper()}={text}")
    return 0


@click.command("resource-stats")
@pass_cli
def resource_stats(cli: CliContext) -> int:
    """Memory, CPU, jobs in flight and database latency of each active worker (from its
    newest health check), with fleet totals."""
    store = admin(cli)
    workers = store.list_workers()
    records = store.latest_health_checks([w.worker_id for w in workers])
    rows = {}
    for w in workers:
        record = records.get(w.worker_id)
        c = record.check if record else None
        rows[w.worker_id] = {
            "memory_mb": round(c.memory_mb, 1) if c and c.memory_mb is not None else None,
            "cpu_percent": c.cpu_percent if c else None,
            "jobs_in_flight": w.jobs_in_flight,
            "db_latency_ms": round(c.db_latency_ms, 2) if c and c.db_latency_ms else None,
        }
    total = {
        "workers": len(rows),
        "memory_mb": round(sum(r["memory_mb"] or 0 for r in rows.values()), 1),
        "jobs_in_flight": sum(int(r["jobs_in_flight"] or 0) for r in rows.values()),
    }
    if cli.as_json:
        cli.emit_json({"workers": rows, "total": total})
        return 0
    for worker_id, r in rows.items():
        click.echo(
            f"{worker_id}: {r['memory_mb']} MB, {r['cpu_percent']} % CPU,"
            f" {r['jobs_in_flight']} in flight, db {r['db_latency_ms']} ms"
        )
    click.echo(
        f"total: {total['workers']} worker(s), {total['memory_mb']} MB,"
        f" {total['jobs_in_flight']} in flight"
    )
    return 0


@click.command("cleanup-health-checks")
@click.option("--days", type=click.FloatRange(0), required=True, help="Keep this many days.")
@pass_cli
def cleanup_health_checks(cli: CliContext, days: float) -> int:
    """Delete health checks older than --days."""
    deleted = admin(cli).delete_health_checks(older_than_days=days)
    click.echo(f"deleted {deleted} health check(s) older than {days:g} day(s)")
    return 0


@click.command("cleanup-failover-events")
@click.option("--days", type=click.FloatRange(0), required=True, help="Keep this many days.")
@pass_cli
def cleanup_failover_events(cli: CliContext, days: float) -> int:
    """Delete failover events older than --days."""
    deleted = admin(cli).delete_failover_events(older_than_days=days)
    click.echo(f"deleted {deleted} failover event(s) older than {days:g} day(s)")
    return 0


@click.command("cleanup-orphaned-assignments")
@pass_cli
def cleanup_orphaned_assignments(cli: CliContext) -> int:
    """Close assignment rows whose attempt no longer runs anywhere and delete those of jobs
    that no longer exist."""
    closed, deleted = admin(cli).close_orphaned_assignments()
    click.echo(f"closed {closed} orphaned assignment(s), deleted {deleted} of deleted jobs")
    return 0
