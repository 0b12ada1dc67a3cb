"""The ``ledgerq`` command line: parses, dispatches, and prints tables or JSON.

structlog imports rich when it is installed, only to offer rich tracebacks, which the CLI does
not use (its logs print plain ones). Importing it here with rich hidden keeps rich out of a
worker's start-up (about 80 ms with pygments and attrs); commands that print tables import
rich themselves. Nothing changes when structlog or rich was imported already.
"""

import sys

if "structlog" not in sys.modules and "rich" not in sys.modules:
    sys.modules["rich"] = None  # type: ignore[assignment]  # makes `import rich` fail
    try:
        import structlog  # noqa: F401
    finally:
        del sys.modules["rich"]
