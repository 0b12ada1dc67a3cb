"""Task definitions and the registry that maps a task name to its handler."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ledgerq.core import errors
from ledgerq.core.job import check_queue_name
from ledgerq.core.limits import TaskLimits
from ledgerq.core.retry import RetryPolicy


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """A registered task: its handler and the defaults its jobs get."""

    name: str
    fn: Callable[..., Any]
    queue: str = "default"
    priority: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    timeout_seconds: float | None = None
    limits: TaskLimits | None = None
    """Fleet-wide rate, concurrency and circuit-breaker limits (see core/limits.py)."""
    is_async: bool = field(init=False, default=False)
    """Whether the handler is an ``async def`` (found once, not per job)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))


class TaskRegistry:
    """Name -> TaskSpec. One per application; never a module global."""

    def __init__(self) -> None:
        self._specs: dict[str, TaskSpec] = {}

    def add(self, spec: TaskSpec) -> TaskSpec:
        """Register ``spec``; a second task with the same name is a ``ConfigError``."""
        check_queue_name(spec.queue)
        if spec.timeout_seconds is not None and spec.timeout_seconds <= 0:
            raise errors.ConfigError(f"task {spec.name!r}: timeout must be positive")
        existing = self._specs.get(spec.name)
        if existing is not None and existing.fn is not spec.fn:
            raise errors.ConfigError(f"task {spec.name!r} is registered twice")
        self._specs[spec.name] = spec
        return spec

    def get(self, name: str) -> TaskSpec:
        """Return the spec or raise ``TaskNotRegistered``."""
        try:
            return self._specs[name]
        except KeyError:
            raise errors.TaskNotRegistered(name) from None

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self) -> Iterator[TaskSpec]:
        return iter(self._specs.values())

    def __len__(self) -> int:
        return len(self._specs)
