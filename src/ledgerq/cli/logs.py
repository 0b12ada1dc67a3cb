"""Log hygiene: a structlog processor that keeps secrets out of every log line, whatever a
caller passed (tokens, passwords, URLs with credentials)."""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping
from typing import Any

#: Field names whose values are never written.
SECRET_KEY = re.compile(r"pass|secret|token|api_?key|authorization|credential|cookie", re.I)
#: ``scheme://user:password@host`` anywhere in a string.
URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)[^@\s]+@")
MASK = "***"


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return URL_PASSWORD.sub(rf"\g<1>{MASK}@", value)
    if isinstance(value, dict):
        return {k: MASK if _secret_key(k) else _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _secret_key(key: Any) -> bool:
    return isinstance(key, str) and bool(SECRET_KEY.search(key))


def redact_secrets(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> Mapping[str, Any]:
    """structlog processor: mask secret-named fields and passwords inside URLs."""
    return {k: MASK if _secret_key(k) else _clean(v) for k, v in event.items()}
