"""``Task.enqueue`` is typed with the handler's parameters: mypy (strict, as the project runs
it) refuses a wrong call before it runs, and accepts the right ones and ``options(...)``."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

SNIPPET = """
from ledgerq import JobContext, LedgerQ

app = LedgerQ()


@app.task
def add(ctx: JobContext, x: int, y: int) -> int:
    return x + y


add.enqueue(1, 2)
add.enqueue(x=1, y=2)
add.options(priority=1, delay=10).enqueue(1, y=2)
total: int = add(None, 1, 2)  # type: ignore[arg-type]
add.enqueue(1, "two")  # BAD
add.enqueue(1)  # BAD
add.enqueue(1, 2, countdown=10)  # BAD
add.options(priority="high")  # BAD
add.options(delay=1).enqueue("one", 2)  # BAD
"""


def test_mypy_checks_enqueue_against_the_handler(tmp_path: Path) -> None:
    source = tmp_path / "typed_tasks.py"
    source.write_text(textwrap.dedent(SNIPPET))
    out, err, status = api.run(
        ["--strict", "--no-incremental", "--no-error-summary", "--show-error-codes", str(source)]
    )
    flagged = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    lines = source.read_text().splitlines()
    bad = {number for number, text in enumerate(lines, start=1) if text.endswith("# BAD")}
    assert flagged == bad, out + err
    assert status == 1
