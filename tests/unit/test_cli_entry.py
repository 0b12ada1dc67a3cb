"""The console script loads the CLI with the garbage collector paused, then runs it with the
collector on again and the start-up objects frozen."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

PROBE = """
import gc, sys
from ledgerq.cli import entry
sys.argv = ["ledgerq", "--help"]
code = entry.main()
print(code, gc.isenabled(), gc.get_freeze_count())
"""


def test_the_console_script_is_the_entry() -> None:
    (script,) = entry_points(group="console_scripts", name="ledgerq")
    assert script.value == "ledgerq.cli.entry:main"


def test_the_cli_runs_with_the_collector_on_and_the_start_up_frozen() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert "Usage: ledgerq" in done.stdout
    code, enabled, frozen = done.stdout.splitlines()[-1].split()
    assert (code, enabled) == ("0", "True")
    assert int(frozen) > 10_000  # the modules' objects, out of the collector's view
