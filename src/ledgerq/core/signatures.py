"""HandlerSignature: what a task handler accepts, read once at registration.

A handler is ``fn(ctx, *args, **kwargs)``. Registration refuses one that does not take the job
context first (it would fail on every run); enqueue binds each call's arguments to the rest of
the signature, so a wrong call is refused before anything is stored instead of dying on a
worker after its attempts.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledgerq.core import errors

_P = inspect.Parameter
#: First-parameter names that say "this is the job context" without an annotation.
CONTEXT_NAMES = frozenset({"ctx", "context", "_ctx", "_context", "_"})
_POSITIONAL = (_P.POSITIONAL_ONLY, _P.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True, slots=True)
class HandlerSignature:
    """The handler's parameters after the job context. ``simple`` signatures (no ``*args``,
    ``**kwargs`` or positional-only parameters) are checked without ``Signature.bind``, which
    matters to bulk enqueue."""

    signature: inspect.Signature
    """The signature without the context parameter."""
    keyword_names: frozenset[str]
    """Parameters a caller may pass by name."""
    positional: tuple[str, ...]
    required: frozenset[str]
    simple: bool

    @classmethod
    def read(cls, fn: Callable[..., Any], task_name: str) -> HandlerSignature | None:
        """The signature of ``fn`` (None when Python cannot tell it, e.g. some builtins);
        ``ConfigError`` when ``fn`` does not take the job context first."""
        try:
            full = inspect.signature(fn)
        except (TypeError, ValueError):
            return None
        params = list(full.parameters.values())
        _check_context_first(params, task_name, fn)
        rest = params if params[0].kind is _P.VAR_POSITIONAL else params[1:]
        signature = full.replace(parameters=rest)
        return cls(
            signature=signature,
            keyword_names=frozenset(
                p.name for p in rest if p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY)
            ),
            positional=tuple(p.name for p in rest if p.kind in _POSITIONAL),
            required=frozenset(
                p.name
                for p in rest
                if p.default is _P.empty and p.kind in (*_POSITIONAL, _P.KEYWORD_ONLY)
            ),
            simple=all(p.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY) for p in rest),
        )

    def check(self, task_name: str, args: Sequence[object], kwargs: Mapping[str, object]) -> None:
        """Raise ``ArgumentsMismatch`` unless ``(args, kwargs)`` bind to the handler."""
        if self.simple and self._fits(args, kwargs):
            return
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise errors.ArgumentsMismatch(
                f"task {task_name!r} cannot take these arguments: {exc} "
                f"(it takes {self.signature}; job options go in "
                f"{task_name.rsplit('.', 1)[-1]}.options(...).enqueue(...))"
            ) from None

    def _fits(self, args: Sequence[object], kwargs: Mapping[str, object]) -> bool:
        given = self.positional[: len(args)]
        if len(args) > len(self.positional):
            return False
        if any(name not in self.keyword_names or name in given for name in kwargs):
            return False
        return all(name in kwargs for name in self.required.difference(given))


def _check_context_first(params: list[inspect.Parameter], task_name: str, fn: object) -> None:
    shown = getattr(fn, "__name__", "handler")
    if not params or params[0].kind not in (*_POSITIONAL, _P.VAR_POSITIONAL):
        raise errors.ConfigError(
            f"task {task_name!r}: a handler takes the job context first, "
            f"as in def {shown}(ctx, ...)"
        )
    first = params[0]
    if first.kind is _P.VAR_POSITIONAL or first.name in CONTEXT_NAMES:
        return
    if _names_job_context(first.annotation):
        return
    raise errors.ConfigError(
        f"task {task_name!r}: a handler takes the job context first, as in "
        f"def {shown}(ctx, {first.name}, ...); its first parameter is {first.name!r} "
        "(name it ctx, or annotate it as JobContext)"
    )


def _names_job_context(annotation: object) -> bool:
    if isinstance(annotation, str):
        return annotation.rsplit(".", 1)[-1] == "JobContext"
    return getattr(annotation, "__name__", None) == "JobContext"
