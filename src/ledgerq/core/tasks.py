"""Task definitions and the registry that maps a task name to its handler."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledgerq.core import errors
from ledgerq.core.job import check_queue_name
from ledgerq.core.limits import TaskLimits
from ledgerq.core.retry import RetryPolicy
from ledgerq.core.signatures import HandlerSignature


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
    signature: HandlerSignature | None = field(init=False, default=None)
    """What the handler takes after the job context (None when Python cannot tell)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "is_async", inspect.iscoroutinefunction(self.fn))
        object.__setattr__(self, "signature", HandlerSignature.read(self.fn, self.name))

    def check_arguments(self, args: Sequence[object], kwargs: Mapping[str, object]) -> None:
        """Raise ``ArgumentsMismatch`` unless a job with these arguments could run."""
        if self.signature is not None:
            self.signature.check(self.name, args, kwargs)

    def takes_keyword(self, name: str) -> bool:
        """Whether the handler has a parameter ``name`` a caller may pass by keyword."""
        return self.signature is not None and name in self.signature.keyword_names


def module_name(fn: Callable[..., Any]) -> str:
    """The module a worker imports to find ``fn``: its ``__module__``, except that a handler
    defined in the script being run (``__main__``) gets the name that script has as a module
    (``python -m pkg.mod``: ``pkg.mod``; ``python tasks.py``: ``tasks``), so the jobs it
    enqueues name a task that workers importing the module know. Code with no file (a REPL)
    keeps ``__main__``: only an in-process worker can run it."""
    module = getattr(fn, "__module__", None) or "__main__"
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        return str(spec.name)
    path = getattr(main, "__file__", None)
    return Path(path).stem if path and Path(path).stem.isidentifier() else module


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
