"""The layer rules of SPEC section 3, checked on every run by import-linter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_inner_layers_never_import_outer_ones() -> None:
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout
