"""``ledgerq serve``: the admin API, health endpoints, /metrics and the dashboard."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click
import structlog

from ledgerq.app import operations_surface, schedule_ops
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.core import errors

if TYPE_CHECKING:
    from pydantic import SecretStr

    from ledgerq.admin.app import HttpApp
    from ledgerq.app.application import LedgerQ

log = structlog.get_logger("ledgerq.serve")
#: Largest body of a bulk request (``POST /api/v1/jobs/bulk``, batches, workflows), in bytes,
#: unless one job's own cap (LEDGERQ_MAX_PAYLOAD_BYTES) asks for more.
BULK_MAX_BYTES = 8 * 1024 * 1024


def build_http(
    app: LedgerQ,
    *,
    admin_tokens: list[str],
    read_tokens: list[str],
    producers: Sequence[tuple[str, str]] = (),
) -> HttpApp:
    """The HTTP application of ``app``: its Client (enqueues counted in metrics), queue
    controls, readiness probes and metrics; tokens are hashed by ``TokenAuth``;
    ``producers`` holds ``(name, token)`` pairs of producer tokens."""
    # Imported here, not at the top: every other command (a worker above all) would otherwise
    # pay for importing FastAPI at start-up.
    from ledgerq.admin.app import create_app
    from ledgerq.admin.auth import TokenAuth
    from ledgerq.admin.deps import AdminDeps, AdminReads

    settings = app.settings
    ops = operations_surface.build_operations(settings, app.parts)
    read = operations_surface.read_side(app.parts, app.registry)
    replica = None if read is None else AdminReads(read.client, read.controls, read.fleet)
    deps = AdminDeps(
        client=operations_surface.build_client(
            app.settings, app.parts, app.registry, ops.metrics.sink
        ),
        controls=ops.controls,
        idempotency=ops.controls,
        fleet=ops.fleet,
        probes=ops.probes,
        render_metrics=ops.metrics.render,
        schedules=schedule_ops.schedule_ops(settings, app.parts, app.registry, app.schedules),
        batches=app.batches,
        workflows=app.workflows,
        locks=operations_surface.lock_admin(app.parts),
        limits=app.limits,
        items=app.parts.items,
        failovers=app.parts.fleet,
        requests=operations_surface.request_ledger(app.parts),
        replica=replica,
    )
    auth = TokenAuth(admin_tokens=admin_tokens, read_tokens=read_tokens, producers=producers)
    # Arguments may be max_payload_bytes of JSON; leave room for the envelope and escaping.
    single = settings.max_payload_bytes * 2 + 4096
    return create_app(deps, auth, max_body_bytes=single, max_bulk_bytes=max(single, BULK_MAX_BYTES))


@click.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@pass_cli
def command(cli: CliContext, host: str, port: int) -> int:
    """Serve the HTTP API and dashboard. Binding anything but loopback needs
    LEDGERQ_API_TOKEN; without one a one-off token is printed for this run."""
    cli.log_as("serve")
    from ledgerq.admin.server import (
        MIN_TOKEN_CHARS,
        AdminServer,
        ConnectionLimits,
        check_bind,
        forward_stdlib_logging,
    )

    app = cli.app()
    admin_tokens = operations_surface.split_tokens(app.settings.api_token)
    read_tokens = operations_surface.split_tokens(app.settings.api_read_token)
    producers = _producers(app.settings.api_producer_token)
    others = read_tokens + [token for _, token in producers]
    check_bind(host, admin_tokens=admin_tokens, read_tokens=others)
    if any(len(token) < MIN_TOKEN_CHARS for token in admin_tokens + others):
        log.warning("an API token is shorter than 16 characters; use a long random one")
    if not admin_tokens:
        admin_tokens = [secrets.token_urlsafe(24)]
        # Shown once to the person at the terminal, like Jupyter does; never logged.
        click.echo(f"no LEDGERQ_API_TOKEN set; token for this run: {admin_tokens[0]}", err=True)
    http = build_http(app, admin_tokens=admin_tokens, read_tokens=read_tokens, producers=producers)
    limits = ConnectionLimits(
        request_timeout=app.settings.api_request_timeout,
        max_connections=app.settings.api_max_connections,
    )
    server = AdminServer(
        http, host=host, port=port, log_level=app.settings.log_level, limits=limits
    )
    forward_stdlib_logging()  # uvicorn's records, unhandled errors above all, as our lines
    log.info(
        "serving",
        host=host,
        port=port,
        read_only_role=bool(read_tokens),
        producers=sorted({name for name, _ in producers}),
    )
    server.run()
    return 0


def _producers(value: SecretStr | None) -> list[tuple[str, str]]:
    """The ``(name, token)`` pairs of LEDGERQ_API_PRODUCER_TOKEN (``ConfigError`` if bad)."""
    from ledgerq.admin.auth import producer_tokens

    try:
        return producer_tokens(operations_surface.split_tokens(value))
    except ValueError as exc:
        raise errors.ConfigError(f"LEDGERQ_API_PRODUCER_TOKEN: {exc}") from None
