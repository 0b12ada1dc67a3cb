"""Many jobs, or many hints, that share all but one column, kept as that column and what they
share: a bulk enqueue builds no object per job on its way to the database and to Redis, yet
every reader still sees a sequence of ``NewJob``s or ``JobHint``s."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import overload

from ledgerq.core.job import JobHint, NewJob


class JobBatch(Sequence[NewJob]):
    """Jobs that differ only in their arguments, as one bulk enqueue builds them: the shared
    ``template`` and each job's ``args_json``. Any reader sees a sequence of ``NewJob``s;
    the bulk paths read the two columns and build no job object per item."""

    __slots__ = ("_jobs", "args_json", "template")

    def __init__(self, template: NewJob, args_json: list[str]) -> None:
        self.template = template
        self.args_json = args_json
        self._jobs: list[NewJob] | None = None

    def __len__(self) -> int:
        return len(self.args_json)

    @overload
    def __getitem__(self, index: int) -> NewJob: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[NewJob]: ...
    def __getitem__(self, index: int | slice) -> NewJob | Sequence[NewJob]:
        return self.jobs()[index]

    def __iter__(self) -> Iterator[NewJob]:
        return iter(self.jobs())

    def jobs(self) -> list[NewJob]:
        """One ``NewJob`` per item, built on first use."""
        if self._jobs is None:
            self._jobs = [replace(self.template, args_json=args) for args in self.args_json]
        return self._jobs


class HintBatch(Sequence[JobHint]):
    """Hints of jobs in one queue at one priority, as a bulk enqueue announces them: the ids
    and the queue and priority they share. Read as ``JobHint``s, each is built when read."""

    __slots__ = ("ids", "priority", "queue")

    def __init__(self, ids: list[int], queue: str, priority: int) -> None:
        self.ids = ids
        self.queue = queue
        self.priority = priority

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, index: int) -> JobHint: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[JobHint]: ...
    def __getitem__(self, index: int | slice) -> JobHint | Sequence[JobHint]:
        if isinstance(index, slice):
            return HintBatch(self.ids[index], self.queue, self.priority)
        return JobHint(self.ids[index], self.queue, self.priority)
