"""``ledgerq workflow list|show|cancel|retry``: workflows (DAGs of steps) for operators."""

from __future__ import annotations

import click
from rich.table import Table
from rich.tree import Tree

from ledgerq.cli.cli_context import CliContext, pass_cli
from ledgerq.core.workflow import StepView, WorkflowState, WorkflowView

_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "yellow",
    "queued": "cyan",
    "waiting": "dim",
    "running": "cyan",
}


@click.group("workflow")
def group() -> None:
    """Inspect, cancel and retry workflows."""


@group.command("list")
@click.option("--state", type=click.Choice([s.value for s in WorkflowState]))
@click.option("--limit", type=click.IntRange(1, 10000), default=50, show_default=True)
@pass_cli
def list_workflows(cli: CliContext, state: str | None, limit: int) -> int:
    """List the newest workflows."""
    views = cli.app().workflows.list(state=WorkflowState(state) if state else None, limit=limit)
    if cli.as_json:
        cli.emit_json([v.as_dict() for v in views])
        return 0
    table = Table(title="workflows")
    for column in ("id", "name", "state", "on_failure", "steps", "created_at"):
        table.add_column(column, overflow="fold")
    for view in views:
        table.add_row(
            view.id,
            view.name,
            f"[{_STYLE.get(view.state.value, '')}]{view.state.value}[/]",
            view.on_failure.value,
            f"{view.steps_done}/{view.steps_total}",
            view.created_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
    cli.console.print(table)
    return 0


@group.command("show")
@click.argument("workflow_id")
@pass_cli
def show(cli: CliContext, workflow_id: str) -> int:
    """Show a workflow as a tree of its steps and their states."""
    view = cli.app().workflows.get(workflow_id)
    if cli.as_json:
        cli.emit_json(view.as_dict())
    else:
        cli.console.print(workflow_tree(view))
    return 0


def workflow_tree(view: WorkflowView) -> Tree:
    """The DAG as a tree: each step under the steps it depends on (a fan-in step appears
    under each of its dependencies)."""
    style = _STYLE.get(view.state.value, "")
    tree = Tree(
        f"[bold]{view.name}[/] {view.id} [{style}]{view.state.value}[/] "
        f"({view.steps_done}/{view.steps_total} steps, on failure: {view.on_failure.value})"
    )
    children: dict[str, list[StepView]] = {}
    for step in view.steps:
        for dep in step.depends_on:
            children.setdefault(dep, []).append(step)

    def add(node: Tree, step: StepView) -> None:
        job = f" job {step.job_id} ({step.job_state})" if step.job_id is not None else ""
        branch = node.add(
            f"{step.name} [dim]{step.task}[/] [{_STYLE.get(step.state.value, '')}]"
            f"{step.state.value}[/]{job}"
        )
        for child in children.get(step.name, []):
            add(branch, child)

    for step in view.steps:
        if not step.depends_on:
            add(tree, step)
    return tree


@group.command("cancel")
@click.argument("workflow_id")
@pass_cli
def cancel(cli: CliContext, workflow_id: str) -> int:
    """Cancel a running workflow and its unfinished steps."""
    view = cli.app().workflows.cancel(workflow_id)
    _report(cli, view)
    return 0


@group.command("retry")
@click.argument("workflow_id")
@pass_cli
def retry(cli: CliContext, workflow_id: str) -> int:
    """Run the failed and cancelled steps again and continue the workflow."""
    view = cli.app().workflows.retry(workflow_id)
    _report(cli, view)
    return 0


def _report(cli: CliContext, view: WorkflowView) -> None:
    if cli.as_json:
        cli.emit_json({"id": view.id, "state": view.state.value})
    else:
        cli.console.print(f"workflow {view.id} is now {view.state.value}")
