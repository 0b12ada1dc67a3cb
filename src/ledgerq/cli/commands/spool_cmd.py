"""``ledgerq spool status|drain``: what the enqueue spool (``LEDGERQ_SPOOL``) holds, and
replaying it into the ledger by hand (workers do it on their own)."""

from __future__ import annotations

from collections.abc import Iterator

import click

from ledgerq.app.spool_wiring import build_spool
from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.core import errors, spool


@click.group("spool")
def group() -> None:
    """Inspect and replay the enqueue spool (LEDGERQ_SPOOL)."""


def _spool(cli: CliContext) -> spool.Spool:
    app = cli.app()
    target = build_spool(app.settings, app.parts.redis)
    if target is None:
        raise errors.ConfigError(
            "no enqueue spool is configured: set LEDGERQ_SPOOL to redis or file:/path"
        )
    return target


def spool_problems(cli: CliContext) -> list[str]:
    """What keeps the configured spool from working (none when it is off): it must take a
    hold (a write: a folder made and removed, or a Redis key set and deleted) and list its
    producers."""
    if cli.app().settings.spool == "off":
        return []
    try:
        target = _spool(cli)
        with target.hold("ledgerq-validate-config"):
            pass
        target.producers()
    except errors.StoreUnavailable as exc:
        return [f"spool: {exc}"]
    return []


def _counts(target: spool.Spool) -> list[spool.SpoolCount]:
    counts = []
    for producer in target.producers():
        entries = target.peek(producer, 1_000_000)
        jobs = sum(len(spool.decode_entry(entry)) for entry in entries)
        if entries:
            counts.append(spool.SpoolCount(producer, len(entries), jobs))
    return counts


@group.command("status")
@pass_cli
def status(cli: CliContext) -> int:
    """How many enqueues and jobs wait in the spool, per producer."""
    counts = _counts(_spool(cli))
    total = sum(c.jobs for c in counts)
    if cli.as_json:
        cli.emit_json(
            {
                "spool": cli.app().settings.spool,
                "jobs": total,
                "entries": sum(c.entries for c in counts),
                "producers": [
                    {"producer": c.producer, "entries": c.entries, "jobs": c.jobs} for c in counts
                ],
            }
        )
        return 0
    if not counts:
        cli.console.print("the spool is empty")
        return 0
    for c in counts:
        cli.console.print(f"{c.producer}: {c.jobs} job(s) in {c.entries} enqueue(s)")
    cli.console.print(f"{total} spooled job(s) in all")
    return 0


@group.command("drain")
@pass_cli
def drain(cli: CliContext) -> int:
    """Replay the spool into the ledger now: each job is created once (by its dedupe key),
    in each producer's order, and leaves the spool only after its commit. Producers that a
    worker is draining right now are skipped (the worker finishes them); exit 1 if jobs
    are left."""
    target = _spool(cli)
    total = sum(c.jobs for c in _counts(target))
    replayed: dict[str, int] = {}
    if cli.as_json or total == 0:
        for producer in target.producers():
            replayed[producer] = sum(_batches(cli, target, producer))
    else:
        from rich.progress import Progress

        with Progress(console=cli.console) as progress:
            bar = progress.add_task("replaying spooled jobs", total=total)
            for producer in target.producers():
                for count in _batches(cli, target, producer):
                    replayed[producer] = replayed.get(producer, 0) + count
                    progress.advance(bar, count)
    left = sum(c.jobs for c in _counts(target))
    done = sum(replayed.values())
    if cli.as_json:
        cli.emit_json(
            {"replayed": done, "left": left, "producers": {p: n for p, n in replayed.items() if n}}
        )
    else:
        cli.console.print(f"replayed {done} job(s); {left} left in the spool")
    return 0 if left == 0 else 1


def _batches(cli: CliContext, target: spool.Spool, producer: str) -> Iterator[int]:
    """The jobs of each batch replayed of ``producer`` (nothing if a worker holds it)."""
    app = cli.app()
    with target.hold(producer) as held:
        if held:
            yield from spool.replay(target, app.parts.store, producer, announce=app.client.announce)
