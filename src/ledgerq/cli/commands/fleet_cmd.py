"""``ledgerq worker list|stats|health|stop|stop-all|deregister|cleanup-crashed|
failover-recovery|failovers``: the fleet as operators see and steer it. Stop requests are rows
in the database, so they reach workers on every host."""

from __future__ import annotations

import http.client
import os
import socket
import urllib.error
import urllib.request
from typing import Any

import click

from ledgerq.app import wiring
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.cli.fleet_output import (
    failover_dict,
    failovers_table,
    health_dict,
    verdict,
    worker_dict,
    workers_table,
)
from ledgerq.core import errors, fleet
from ledgerq.store.fleet_admin import SqlFleetAdmin


def admin(cli: CliContext) -> SqlFleetAdmin:
    """The fleet store of the configured database."""
    return cli.app().parts.fleet


def _announce_stop(cli: CliContext, worker_id: str | None, mode: fleet.StopMode) -> None:
    """Also send the request over Redis when configured, so workers stop at once rather than
    at their next heartbeat; the database already holds it, so a failure costs time only."""
    app = cli.app()
    channel = wiring.control_channel(app.settings, app.parts)
    if channel is None:
        return
    try:
        channel.publish_stop(worker_id=worker_id, mode=mode.value)
    except errors.TransportError:
        pass
    finally:
        channel.close()


def _who(cli: CliContext) -> str:
    return f"cli {socket.gethostname()}:{os.getpid()}"


@click.command("list")
@click.option("--all", "include_all", is_flag=True, help="Include stopped and dead workers.")
@pass_cli
def list_workers(cli: CliContext, include_all: bool) -> int:
    """Registered workers (active ones unless --all)."""
    workers = admin(cli).list_workers(include_inactive=include_all)
    if cli.as_json:
        cli.emit_json([worker_dict(w) for w in workers])
    else:
        cli.console.print(workers_table(workers))
    return 0


@click.command("stats")
@pass_cli
def stats(cli: CliContext) -> int:
    """Jobs per worker and outcome (from the assignment history) and fleet totals."""
    store = admin(cli)
    workers = store.list_workers(include_inactive=True)
    outcomes = store.outcome_counts()
    active = [w for w in workers if w.state is fleet.WorkerState.ACTIVE]
    summary = {
        "workers_active": len(active),
        "workers_registered": len(workers),
        "jobs_in_flight": sum(w.jobs_in_flight for w in active),
        "failover_events": len(store.list_failover_events(limit=100_000)),
        "outcomes": outcomes,
    }
    if cli.as_json:
        cli.emit_json(summary)
        return 0
    cli.console.print(
        f"{summary['workers_active']} active of {summary['workers_registered']} registered"
        f" workers, {summary['jobs_in_flight']} jobs in flight,"
        f" {summary['failover_events']} failover events"
    )
    for worker_id, counts in sorted(outcomes.items()):
        shown = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        cli.console.print(f"  {worker_id}: {shown}")
    return 0


@click.command("health")
@click.option("--worker-id", help="One worker (default: every active worker).")
@click.option(
    "--self",
    "this_host",
    is_flag=True,
    help="The active workers of this host (the hostname workers record): a container's"
    " HEALTHCHECK. Exit 1 if none runs here.",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    help="Ask the health port of a worker on this host (worker start --health-port) instead"
    " of the database: healthy if /health/ready (or /health/live, where no readiness is"
    " served) answers 200 within --timeout.",
)
@click.option(
    "--timeout", type=click.FloatRange(0.1, 60), default=5.0, show_default=True, help="Seconds."
)
@pass_cli
def health(
    cli: CliContext, worker_id: str | None, this_host: bool, port: int | None, timeout: float
) -> int:
    """Exit 0 if the worker (or every active worker) is healthy, 1 if not: for container
    health checks. A worker alive but no longer consuming counts as unhealthy."""
    if sum((worker_id is not None, this_host, port is not None)) > 1:
        raise click.UsageError("give one of --worker-id, --self and --port")
    if port is not None:
        return _probe_port(cli, port, timeout)
    store = admin(cli)
    if worker_id is not None:
        one = store.get_worker(worker_id)
        if one is None:
            raise click.ClickException(f"no worker {worker_id!r} is registered")
        workers = [one]
    else:
        workers = store.list_workers()
        if this_host:
            host = socket.gethostname()
            workers = [w for w in workers if w.hostname == host]
    records = store.latest_health_checks([w.worker_id for w in workers])
    settings = cli.app().settings
    report: dict[str, dict[str, Any]] = {}
    for w in workers:
        problems = verdict(
            w,
            records.get(w.worker_id),
            ttl_seconds=settings.worker_ttl,
            health_interval_seconds=settings.worker_health_check_interval,
        )
        report[w.worker_id] = {
            "healthy": not problems,
            "problems": problems,
            "last_check": health_dict(records.get(w.worker_id)),
        }
    healthy = bool(report) and all(r["healthy"] for r in report.values())
    if cli.as_json:
        cli.emit_json({"healthy": healthy, "workers": report})
    elif not report:
        click.echo("unhealthy: no active workers" + (" on this host" if this_host else ""))
    else:
        for name, r in report.items():
            state = "healthy" if r["healthy"] else "UNHEALTHY: " + "; ".join(r["problems"])
            click.echo(f"{name}: {state}")
    return 0 if healthy else 1


def _probe_port(cli: CliContext, port: int, timeout: float) -> int:
    """GET /health/ready of 127.0.0.1:``port`` (/health/live where it answers 404)."""
    answer = "no answer"
    healthy = False
    for path in ("/health/ready", "/health/live"):
        url = f"http://127.0.0.1:{port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                healthy, answer = response.status == 200, f"{path} answered {response.status}"
        except urllib.error.HTTPError as exc:
            answer = f"{path} answered {exc.code}"
            if exc.code == 404:
                continue
        except (OSError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", None) or exc
            answer = f"{path} did not answer: {reason}"
        break
    if cli.as_json:
        cli.emit_json({"healthy": healthy, "port": port, "answer": answer})
    else:
        click.echo(f"{'healthy' if healthy else 'unhealthy'}: {answer}")
    return 0 if healthy else 1


def _stop_mode(immediate: bool) -> fleet.StopMode:
    return fleet.StopMode.IMMEDIATE if immediate else fleet.StopMode.GRACEFUL


_GRACEFUL_HELP = "Let in-flight jobs finish within the worker's grace period (the default)."
_IMMEDIATE_HELP = "Skip the grace period: put in-flight jobs back to the queue at once."


@click.command("stop")
@click.option("--worker-id", help="The worker to stop.")
@click.option(
    "--this-host",
    is_flag=True,
    help="Every active worker of this host (the hostname workers record).",
)
@click.option("--graceful", "graceful", is_flag=True, help=_GRACEFUL_HELP)
@click.option("--immediate", is_flag=True, help=_IMMEDIATE_HELP)
@pass_cli
def stop(
    cli: CliContext, worker_id: str | None, this_host: bool, graceful: bool, immediate: bool
) -> int:
    """Ask a worker (or this host's workers) to stop, on whatever host it runs; it sees the
    request at its next heartbeat, or at once through Redis when configured. Graceful by
    default: running jobs finish within the grace period (WORKER --grace, SHUTDOWN_GRACE),
    the rest go back to the queue; --immediate puts them back at once."""
    if (worker_id is None) == (not this_host):
        raise click.UsageError("give either --worker-id ID or --this-host")
    if graceful and immediate:
        raise click.UsageError("--graceful and --immediate contradict each other")
    mode = _stop_mode(immediate)
    store = admin(cli)
    if worker_id is not None:
        targets = [worker_id]
    else:
        host = socket.gethostname()
        targets = [w.worker_id for w in store.list_workers() if w.hostname == host]
    asked = [t for t in targets if store.request_stop(worker_id=t, mode=mode)]
    if worker_id is not None and not asked:
        raise click.ClickException(f"no active worker {worker_id!r}")
    for target in asked:
        _announce_stop(cli, target, mode)
    if cli.as_json:
        cli.emit_json({"stop_requested": asked, "mode": mode.value})
    elif worker_id is not None:
        click.echo(f"stop ({mode.value}) requested for {worker_id}")
    else:
        click.echo(f"stop ({mode.value}) requested for {len(asked)} worker(s) of this host")
    return 0


@click.command("stop-all")
@click.option("--graceful", "graceful", is_flag=True, help=_GRACEFUL_HELP)
@click.option("--immediate", is_flag=True, help=_IMMEDIATE_HELP)
@pass_cli
def stop_all(cli: CliContext, graceful: bool, immediate: bool) -> int:
    """Ask every active worker to stop; graceful by default, as ``stop``."""
    if graceful and immediate:
        raise click.UsageError("--graceful and --immediate contradict each other")
    mode = _stop_mode(immediate)
    asked = admin(cli).request_stop(worker_id=None, mode=mode)
    _announce_stop(cli, None, mode)
    if cli.as_json:
        cli.emit_json({"stop_requested": asked, "mode": mode.value})
    else:
        click.echo(f"stop ({mode.value}) requested for {asked} worker(s)")
    return 0


@click.command("deregister")
@click.option("--worker-id", required=True, help="The worker to remove from the registry.")
@pass_cli
def deregister(cli: CliContext, worker_id: str) -> int:
    """Remove a worker from the registry; its running jobs go back to the queue at once
    (fenced). A worker that is in fact alive notices and registers again."""
    try:
        event = admin(cli).remove_worker(worker_id, detected_by=_who(cli))
    except LookupError:
        raise click.ClickException(f"no worker {worker_id!r} is registered") from None
    moved = len(event.requeued) + len(event.dead) if event else 0
    click.echo(f"deregistered {worker_id}; {moved} running job(s) moved back")
    return 0


@click.command("cleanup-crashed")
@pass_cli
def cleanup_crashed(cli: CliContext) -> int:
    """Fail over stale workers, then delete registry rows of dead and stopped workers."""
    removed = admin(cli).remove_crashed_workers(
        ttl_seconds=cli.app().settings.worker_ttl, detected_by=_who(cli)
    )
    if cli.as_json:
        cli.emit_json({"removed": removed})
    else:
        click.echo(f"removed {removed} dead or stopped worker(s) from the registry")
    return 0


@click.command("failover-recovery")
@click.option(
    "--force",
    is_flag=True,
    help="Also move running jobs of non-active workers whose leases have not expired yet.",
)
@pass_cli
def failover_recovery(cli: CliContext, force: bool) -> int:
    """Fail over every worker whose heartbeat is older than WORKER_TTL now, as the workers
    themselves do every FAILOVER_CHECK_INTERVAL."""
    events = admin(cli).fail_over_workers(
        ttl_seconds=cli.app().settings.worker_ttl, detected_by=_who(cli), force=force
    )
    if cli.as_json:
        cli.emit_json(
            [
                {
                    "worker_id": e.worker_id,
                    "requeued": list(e.requeued),
                    "dead": list(e.dead),
                    "duration_ms": round(e.duration_ms, 2),
                }
                for e in events
            ]
        )
        return 0
    for e in events:
        click.echo(
            f"failed over {e.worker_id}: {len(e.requeued)} job(s) requeued,"
            f" {len(e.dead)} dead (attempts exhausted), {e.duration_ms:.1f} ms"
        )
    if not events:
        click.echo("no stale workers")
    return 0


@click.command("failovers")
@click.option(
    "--limit", type=click.IntRange(1, 100_000), default=50, show_default=True, help="Newest N."
)
@pass_cli
def failovers(cli: CliContext, limit: int) -> int:
    """The failover record, newest first: the dead worker, who noticed, the jobs moved
    (requeued, and buried because their attempts were spent) and the time it took."""
    events = admin(cli).list_failover_events(limit=limit)
    if cli.as_json:
        cli.emit_json([failover_dict(e) for e in events])
    else:
        cli.console.print(failovers_table(events))
    return 0
