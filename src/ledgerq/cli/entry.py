"""The ``ledgerq`` console script: loads the command line with Python's cyclic garbage
collector paused, then freezes what the imports built.

A worker's start-up is mostly imports (SQLAlchemy, pydantic, psycopg, redis-py), and they
allocate enough container objects to trigger dozens of collections that find no garbage;
pausing them cuts about a seventh of the import time. ``gc.freeze()`` then moves the modules'
objects out of the collector's view, so later full collections in a busy worker do not walk
them again. Only the command line does this; importing ledgerq as a library changes nothing.
"""

from __future__ import annotations

import gc


def main() -> int:
    """Import the CLI with the collector paused, then run it (see ``ledgerq.cli.main``)."""
    gc.disable()
    try:
        from ledgerq.cli.lazy import freeze_command_imports
        from ledgerq.cli.main import main as run_cli
    finally:
        gc.enable()
    freeze_command_imports()  # these imports, and the command's own (most of it) when named
    return run_cli()
