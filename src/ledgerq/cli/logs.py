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
    return {k: MASK if is_secret_name(k) else mask_value(v) for k, v in event.items()}
