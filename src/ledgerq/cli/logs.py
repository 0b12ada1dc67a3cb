"""Log hygiene and shape: structlog processors that keep secrets out of every log line,
whatever a caller passed (tokens, passwords, URLs with credentials), and give each line the
fields log pipelines route on (``component``, an upper-case ``level``, ``message``)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any, NamedTuple

from ledgerq.cli.log_output import LogOutput
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


#: Loggers whose lines belong to a component other than their process's own (a worker that
#: runs the reconciler or fires schedules, ``serve``'s audit log).
COMPONENT_OF_LOGGER = {
    "ledgerq.reconciler": "reconciler",
    "ledgerq.scheduler": "scheduler",
    "ledgerq.manager": "manager",
    "ledgerq.audit": "serve",
    "ledgerq.serve": "serve",
}


class NamedPrintLogger:
    """Writes rendered lines to a ``LogOutput`` (DEBUG and INFO as routine lines, the rest at
    once), and remembers the name it was asked for, so a processor can tell which part of
    ledgerq wrote a line."""

    def __init__(self, output: LogOutput, name: str | None) -> None:
        self._output = output
        self.name = name

    def msg(self, message: str) -> None:
        """Write ``message`` at once."""
        self._output.urgent(message)

    def routine(self, message: str) -> None:
        """Write ``message`` as a routine line (gathered while a worker runs)."""
        self._output.routine(message)

    debug = info = routine
    log = warn = warning = error = err = critical = fatal = failure = exception = msg


class NamedPrintLoggerFactory:
    """Makes a ``NamedPrintLogger`` per ``structlog.get_logger(name)``, writing to ``output``."""

    def __init__(self, output: LogOutput) -> None:
        self._output = output

    def __call__(self, *args: Any) -> NamedPrintLogger:
        """A logger named by the first argument, if it is a string."""
        name = args[0] if args and isinstance(args[0], str) else None
        return NamedPrintLogger(self._output, name)


class ComponentTagger:
    """structlog processor: a ``component`` field on every line (the seeds' log pipelines
    route and alert on it): the logger's own component if it has one, else the process's
    (``cli`` until a long-running command names itself with ``name``)."""

    def __init__(self, name: str = "cli") -> None:
        self.name = name

    def __call__(
        self, logger: Any, _method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        """Add ``component`` unless the caller gave one."""
        if "component" not in event:
            own = COMPONENT_OF_LOGGER.get(getattr(logger, "name", None) or "")
            event["component"] = own or self.name
        return event


def upper_case_level(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor (after ``add_log_level``): ``ERROR``, ``WARNING``, ``INFO``,
    ``DEBUG``, as the seeds' log pipelines match (``[level] == "ERROR"``)."""
    level = event.get("level")
    if isinstance(level, str):
        event["level"] = level.upper()
    return event


def add_message(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor for JSON lines: the text also as ``message`` (structlog calls it
    ``event``; the seeds' pipelines read ``message``)."""
    if "message" not in event and "event" in event:
        event["message"] = event["event"]
    return event


class LogSetup(NamedTuple):
    """What a command may change about its process's logs once they are configured."""

    component: ComponentTagger
    """Names the process's component on each line (a long-running command names itself)."""
    output: LogOutput
    """Where lines go (a worker gathers its routine lines)."""
