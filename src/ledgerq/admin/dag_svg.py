"""A workflow's DAG as inline SVG: a layered layout (a step's column is the longest path of
dependencies before it), each step a box coloured by its state and linked to its job, an arrow
per dependency. Drawn on the server, so the page needs no script library (and the CSP's
``style-src 'self'`` holds: colours are classes of the served style sheet)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ledgerq.core.workflow import StepView

NODE_WIDTH = 170
NODE_HEIGHT = 44
COLUMN_GAP = 70
ROW_GAP = 22
MARGIN = 12


def layers(steps: Sequence[StepView]) -> dict[str, int]:
    """Each step's column: 0 without dependencies, else one more than its deepest
    dependency. Unknown dependency names are ignored (the store refuses them anyway)."""
    known = {step.name: step for step in steps}
    column: dict[str, int] = {}

    def depth(name: str, seen: frozenset[str]) -> int:
        if name in column:
            return column[name]
        parents = [d for d in known[name].depends_on if d in known and d not in seen]
        found = 1 + max((depth(d, seen | {name}) for d in parents), default=-1)
        column[name] = found
        return found

    for step in steps:
        depth(step.name, frozenset())
    return column


def step_state(step: StepView) -> str:
    """What the box shows: the job's finer state while the step is queued (``running``)."""
    if step.state.value == "queued" and step.job_state:
        return step.job_state
    return step.state.value


def positions(steps: Sequence[StepView]) -> dict[str, tuple[int, int]]:
    """Top-left corner of each step's box: columns by layer, rows in declaration order."""
    column = layers(steps)
    rows: dict[int, int] = {}
    placed: dict[str, tuple[int, int]] = {}
    for step in steps:
        layer = column[step.name]
        row = rows.get(layer, 0)
        rows[layer] = row + 1
        placed[step.name] = (
            MARGIN + layer * (NODE_WIDTH + COLUMN_GAP),
            MARGIN + row * (NODE_HEIGHT + ROW_GAP),
        )
    return placed


def _edge(start: tuple[int, int], end: tuple[int, int]) -> str:
    x1, y1 = start[0] + NODE_WIDTH, start[1] + NODE_HEIGHT // 2
    x2, y2 = end[0] - 6, end[1] + NODE_HEIGHT // 2
    bend = (x2 - x1) // 2
    return (
        f'<path class=edge d="M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}"'
        ' marker-end="url(#arrow)"/>'
    )


def _node(step: StepView, at: tuple[int, int]) -> str:
    x, y = at
    state = step_state(step)
    label = escape(step.name if len(step.name) <= 22 else step.name[:21] + "…")
    box = (
        f'<g class="node {escape(state)}" data-step="{escape(step.name)}"'
        f' data-state="{escape(state)}"><title>{escape(step.name)} ({escape(step.task)}):'
        f" {escape(state)}</title>"
        f'<rect x="{x}" y="{y}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="6"/>'
        f'<text x="{x + 10}" y="{y + 18}" class=name>{label}</text>'
        f'<text x="{x + 10}" y="{y + 35}" class=sub>{escape(state)}</text></g>'
    )
    if step.job_id is None:
        return box
    return f'<a href="/dashboard/jobs/{int(step.job_id)}">{box}</a>'


def render(steps: Sequence[StepView]) -> str:
    """The whole ``<svg>`` element of ``steps`` (an empty string for none)."""
    if not steps:
        return ""
    placed = positions(steps)
    width = max(x for x, _ in placed.values()) + NODE_WIDTH + MARGIN
    height = max(y for _, y in placed.values()) + NODE_HEIGHT + MARGIN
    edges = [
        _edge(placed[dep], placed[step.name])
        for step in steps
        for dep in step.depends_on
        if dep in placed
    ]
    nodes = [_node(step, placed[step.name]) for step in steps]
    return (
        f'<svg id=dag class=dag xmlns="http://www.w3.org/2000/svg" width="{width}"'
        f' height="{height}" viewBox="0 0 {width} {height}" role=img'
        ' aria-label="workflow steps and their dependencies">'
        '<defs><marker id=arrow viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"'
        ' markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#8c959f"/>'
        "</marker></defs>" + "".join(edges) + "".join(nodes) + "</svg>"
    )
