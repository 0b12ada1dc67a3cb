"""What every command gets: the settings, the application (loaded from ``--app`` on demand)
and the output mode. The application's module (and with it SQLAlchemy and the store) is
imported only when a command asks for the application: ``--help`` and usage errors skip it."""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from ledgerq.core import errors

if TYPE_CHECKING:
    from rich.console import Console

    from ledgerq.app.application import LedgerQ
    from ledgerq.cli.logs import LogSetup
    from ledgerq.config.settings import Settings


def load_app(reference: str) -> LedgerQ:
    """Import ``module:attribute`` and return the LedgerQ it names, or raise AppNotFound."""
    from ledgerq.app.application import LedgerQ  # the store's libraries: only when needed

    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise errors.AppNotFound(f"--app must look like module:attribute, got {reference!r}")
    if "" not in sys.path:
        sys.path.insert(0, "")  # like uvicorn and celery: the working directory is importable
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise errors.AppNotFound(f"cannot import module {module_name!r}: {exc}") from None
    app = getattr(module, attribute, None)
    if not isinstance(app, LedgerQ):
        raise errors.AppNotFound(f"{reference!r} is not a LedgerQ application")
    return app


@dataclass
class CliContext:
    """Shared state of one CLI invocation."""

    settings: Settings
    as_json: bool = False
    overrides: dict[str, Any] = field(default_factory=dict)
    """Settings given as CLI flags; they win over an ``--app`` application's own settings."""
    log_setup: LogSetup | None = None
    """Names the process's component on its log lines (see ``log_as``) and says where the
    lines go (see ``gather_routine_logs``)."""
    _app: LedgerQ | None = None
    _console: Console | None = None

    def log_as(self, component: str) -> None:
        """Name this process's component on its log lines from now on (``worker``,
        ``serve``, ``scheduler``, ``reconciler``, ``manager``; ``cli`` by default)."""
        if self.log_setup is not None:
            self.log_setup.component.name = component

    def gather_routine_logs(self, on: bool) -> None:
        """Gather this process's DEBUG and INFO lines and write them together (``on``: a
        worker's slots then never wait on a write; see ``cli/log_output.py``), or write what
        was gathered and every line at once again."""
        if self.log_setup is None:
            return
        if on:
            self.log_setup.output.gather()
        else:
            self.log_setup.output.write_at_once()

    @property
    def console(self) -> Console:
        """The rich console for tables and progress (imported on first use: a worker never
        prints one, and rich costs its start-up tens of milliseconds)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console()
        return self._console

    def app(self, *, tasks_needed: bool = False) -> LedgerQ:
        """The ``--app`` application, or (when no tasks are needed) one from the settings."""
        if self._app is None:
            if self.settings.app:
                self._app = load_app(self.settings.app)
                if self.overrides:
                    self._app.reconfigure(**self.overrides)
            elif tasks_needed:
                raise errors.AppNotFound(
                    "this command runs or checks tasks: name your application with"
                    " --app module:attribute or LEDGERQ_APP"
                )
            else:
                from ledgerq.app.application import LedgerQ  # see load_app

                self._app = LedgerQ(self.settings)
        return self._app

    def close(self) -> None:
        """Release the application's connections (called when the command ends)."""
        if self._app is not None:
            self._app.close()

    def emit_json(self, value: Any) -> None:
        """Print ``value`` as one JSON document for machines."""
        click.echo(json.dumps(value, default=str, indent=2))


pass_cli = click.make_pass_decorator(CliContext)
