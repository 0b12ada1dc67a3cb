"""JSON payload codec with a size cap and a depth cap; pickle is never used."""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ledgerq.core import errors

DEFAULT_MAX_BYTES = 256 * 1024
DEFAULT_MAX_DEPTH = 32
# Built once: ``json.dumps`` with any option builds a new encoder on every call, which cost a
# bulk enqueue as much client CPU as the encoding itself. Where CPython's C encoder exists it
# is called directly (``JSONEncoder.encode`` still builds one per call). Without cycle
# markers: a payload with a cycle never gets here (a flat one has none, and ``_check_depth``
# refuses a nested one as too deep), and no state is shared between threads.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_MAKE_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Callable[[Any, int], Sequence[str]] | None = (
    None
    if _MAKE_C_ENCODER is None
    else _MAKE_C_ENCODER(
        None, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
)


def _to_json(value: Any) -> str:
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


class PayloadCodec:
    """Encodes job arguments and results as compact JSON and refuses what cannot travel."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, max_depth: int = DEFAULT_MAX_DEPTH):
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    def encode(self, value: Any) -> str:
        """Return ``value`` as JSON text; raise ``PayloadError`` if it is not JSON,
        nested deeper than ``max_depth`` or larger than ``max_bytes`` once encoded."""
        _check_depth(value, self.max_depth)
        return self._dump(value)

    def _dump(self, value: Any) -> str:
        try:
            text = _to_json(value)
        except (TypeError, ValueError) as exc:
            raise errors.PayloadError(f"job arguments must be JSON: {exc}") from None
        # ASCII: one byte per character and no lone surrogate, so nothing to encode.
        size = len(text) if text.isascii() else self._utf8_size(text)
        if size > self.max_bytes:
            raise errors.PayloadError(
                f"payload of {size} bytes exceeds the cap of {self.max_bytes} bytes"
            )
        return text

    @staticmethod
    def _utf8_size(text: str) -> int:
        try:
            return len(text.encode("utf-8"))
        except UnicodeEncodeError:
            # A lone surrogate ("\ud800") is valid in a Python str and JSON's \u escapes,
            # but no database can store it.
            raise errors.PayloadError(
                "job arguments must be valid Unicode text (they hold a lone surrogate)"
            ) from None

    def decode(self, text: str) -> Any:
        """Parse stored JSON text; raise ``PayloadError`` if it is not JSON."""
        try:
            return json.loads(text)
        except (TypeError, ValueError) as exc:
            raise errors.PayloadError(f"stored payload is not JSON: {exc}") from None

    def encode_args(self, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]) -> str:
        """Encode positional and keyword arguments as ``{"args": [...], "kwargs": {...}}``."""
        value = {"args": list(args), "kwargs": kwargs}
        if self.max_depth >= 2 and _flat(args) and _flat(kwargs.values()):
            return self._dump(value)  # flat arguments: the depth walk can be skipped
        return self.encode(value)

    def decode_args(self, text: str) -> tuple[list[Any], dict[str, Any]]:
        """Inverse of ``encode_args``."""
        value = self.decode(text)
        if not isinstance(value, dict):
            raise errors.PayloadError("stored arguments are not an object")
        return list(value.get("args", [])), dict(value.get("kwargs", {}))


#: What the depth walk descends into (a tuple, not ``dict | list | tuple``: a union built on
#: every call cost a bulk enqueue more than the JSON encoding).
_CONTAINERS = (dict, list, tuple)


def _flat(values: Iterable[Any]) -> bool:
    """Whether none of ``values`` is a container."""
    # A plain loop: ``all()`` over a generator cost three times as much per call.
    for value in values:  # noqa: SIM110
        if isinstance(value, _CONTAINERS):
            return False
    return True


def _check_depth(value: Any, limit: int) -> None:
    # Iterative so a hostile, deeply nested value cannot blow the interpreter's stack.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, _CONTAINERS):
            if depth > limit:
                raise errors.PayloadError(f"payload is nested deeper than {limit} levels")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
