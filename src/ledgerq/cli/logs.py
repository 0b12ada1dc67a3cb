"""Log hygiene: a structlog processor that keeps secrets out of every log line, whatever a
caller passed (tokens, passwords, URLs with credentials)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from ledgerq.core.redaction import MASK, is_secret_name, mask_value


def redact_secrets(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> Mapping[str, Any]:
    """structlog processor: mask secret-named fields, passwords inside URLs and
    ``password=``-style values (``ledgerq.core.redaction``, the rule every surface uses)."""
    for key, value in event.items():
        if is_secret_name(key) or not _plain(value):
            return {k: MASK if is_secret_name(k) else mask_value(v) for k, v in event.items()}
    return event  # the common line: nothing that could hold a secret, so no copy


def _plain(value: object) -> bool:
    """Whether ``value`` cannot hold a secret: a number, or a string no masking rule matches
    (each needs an ``=`` or a ``:``)."""
    if isinstance(value, str):
        return "=" not in value and ":" not in value
    return value is None or isinstance(value, int | float)
