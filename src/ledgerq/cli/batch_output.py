"""Rendering batch items and batches of jobs for people: rich progress bars and counts."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ledgerq.core.batches import BatchEvent, BatchStatus
from ledgerq.core.items import ItemProgress
from ledgerq.core.states import JobState

BAR_WIDTH = 40


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def _bar(done: int, total: int, label: str) -> RenderableType:
    table = Table.grid(padding=(0, 1))
    table.add_row(
        Text(label, style="bold"),
        ProgressBar(total=max(total, 1), completed=min(done, total), width=BAR_WIDTH),
        Text(f"{done}/{total} ({100 * done / max(total, 1):.0f}%)"),
    )
    return table


def item_progress(progress: ItemProgress) -> RenderableType:
    """A progress bar of a job's items, with rate and estimated time left."""
    total = progress.total if progress.total is not None else progress.done
    parts: list[RenderableType] = [_bar(progress.done, total, "items")]
    details = [f"{progress.done_this_attempt} by this attempt"]
    if progress.rate_per_second is not None:
        details.append(f"{progress.rate_per_second:.1f} items/s")
    if progress.eta_seconds is not None:
        details.append(f"ETA {_duration(progress.eta_seconds)}")
    parts.append(Text("       " + ", ".join(details)))
    return Group(*parts)


def batch_view(status: BatchStatus) -> RenderableType:
    """A batch: progress bar of finished members, counts per state, callbacks."""
    counts = Table(title=f"batch {status.id}", show_header=True)
    for state in JobState:
        if state is not JobState.HELD:
            counts.add_column(state.value, justify="right")
    counts.add_row(*(str(status.counts.get(s, 0)) for s in JobState if s is not JobState.HELD))
    callbacks = Table(show_header=True, box=None)
    for column in ("callback", "task", "fired at"):
        callbacks.add_column(column)
    for event in BatchEvent:
        task = status.callbacks.get(event)
        fired = status.fired_at.get(event)
        callbacks.add_row(
            event.value,
            task.task if task else "-",
            fired.strftime("%Y-%m-%d %H:%M:%S") if fired else "",
        )
    return Group(_bar(status.finished, status.size, "finished"), counts, callbacks)
