"""Board: the live view of a demo run, drawn from the ledger's counts: a progress bar of
finished jobs (with jobs/s and ETA) and the number of jobs in each state."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Task as ProgressTask
from rich.text import Text

from ledgerq.core.states import FINISHED, JobState

#: Colour of each state in the counts line.
STYLES: Mapping[JobState, str] = {
    JobState.QUEUED: "cyan",
    JobState.RUNNING: "yellow",
    JobState.FAILED: "magenta",
    JobState.SUCCEEDED: "green",
    JobState.DEAD: "red",
}


class RateColumn(ProgressColumn):
    """Finished jobs per second, averaged over the last few seconds."""

    def render(self, task: ProgressTask) -> Text:
        """The rate as text."""
        speed = task.finished_speed or task.speed
        shown = f"{speed:,.0f} jobs/s" if speed else "- jobs/s"
        return Text(shown, style="progress.data.speed")


def finished_count(states: Mapping[JobState, int]) -> int:
    """Jobs in a state they never leave on their own."""
    return sum(n for state, n in states.items() if state in FINISHED)


def states_line(states: Mapping[JobState, int]) -> Text:
    """``queued 12 · running 16 · ...`` for every state that holds jobs (failed means
    waiting for a retry)."""
    line = Text()
    for state in JobState:
        count = states.get(state, 0)
        if count or state in STYLES:
            if line:
                line.append("  ·  ", style="dim")
            label = "failed, retry due" if state is JobState.FAILED else state.value
            line.append(f"{label} ", style="dim")
            line.append(f"{count:,}", style=STYLES.get(state, "bold"))
    return line


class Board:
    """Shows progress while a demo runs; does nothing when not ``enabled`` (JSON output)."""

    def __init__(self, console: Console, total: int, *, enabled: bool) -> None:
        self._enabled = enabled
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            RateColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TimeElapsedColumn(),
            console=console,
            speed_estimate_period=5.0,
        )
        self._task: TaskID = self._progress.add_task("jobs", total=total, start=False)
        self._live = Live(console=console, refresh_per_second=8, transient=False)

    def __enter__(self) -> Board:
        if self._enabled:
            self._live.update(self._progress)
            self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._enabled:
            self._live.stop()
            if not self._live.console.is_terminal:
                # Rich ends the final frame without a newline when the output is not a terminal.
                self._live.console.line()

    def start_clock(self) -> None:
        """Start the elapsed-time and rate clocks (when the workers start)."""
        self._progress.start_task(self._task)

    def show(self, states: Mapping[JobState, int], note: str) -> None:
        """Draw the latest counts; ``note`` says what the demo is doing."""
        if not self._enabled:
            return
        self._progress.update(self._task, completed=finished_count(states), description=note)
        self._live.update(Group(self._progress, states_line(states)))
