"""Completion hooks: what a job's final outcome moves besides its own row (a batch's callbacks,
a workflow's next steps). The job store is given its hooks when it is built and runs those
that a group of completions concerns inside the transaction that writes the outcomes; a group
that concerns none (the common case) costs one attribute read per completion and hook."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy.engine import Connection

from ledgerq.core.ports import Completion
from ledgerq.core.workflow import WorkflowCommit
from ledgerq.store.dialects import Dialect

#: Runs in the completion's transaction; returns what to announce once it committed.
Run = Callable[[Connection, Dialect, Sequence[Completion], Sequence[bool]], WorkflowCommit]
#: Called once a completion's transaction committed with what its hooks queued or emitted.
Announce = Callable[[WorkflowCommit], None]


@dataclass(frozen=True, slots=True)
class CompletionHook:
    """One hook: ``member`` reads the completion's membership (an id, or None when it is not
    a member; an ``operator.attrgetter``, so the test runs in C), ``run`` gets every
    completion of the group with its applied flag. ``row_by_row``: the outcomes must be
    written one statement each before ``run`` reads them (a batch counts its members')."""

    name: str
    member: Callable[[Completion], object]
    run: Run
    row_by_row: bool = False

    def concerns(self, completions: Sequence[Completion]) -> bool:
        """Whether any of ``completions`` is a member of what this hook moves."""
        return any(map(self.member, completions))  # ids are never 0 or empty


def run_hooks(
    conn: Connection,
    dialect: Dialect,
    hooks: Sequence[CompletionHook],
    completions: Sequence[Completion],
    applied: Sequence[bool],
) -> WorkflowCommit:
    """Run ``hooks`` in their order (so concurrent completions lock alike) in ``conn``'s
    transaction; return what they queued or emitted, to announce once committed."""
    commit = WorkflowCommit()
    for hook in hooks:
        done = hook.run(conn, dialect, completions, applied)
        commit.workflow_ids |= done.workflow_ids
        commit.hints.extend(done.hints)
    return commit
