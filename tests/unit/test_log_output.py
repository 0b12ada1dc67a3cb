"""A worker's log output: routine lines gathered off the slots' threads and written together,
warnings at once and in order, nothing lost when the stream fails once or the worker stops."""

from __future__ import annotations

import threading

import pytest

from ledgerq.cli import log_output
from ledgerq.cli.log_output import LogOutput
from tests.helpers import wait_until


class RecordingStream:
    """A text stream that records each write and the thread that made it; ``fail_next``
    makes the next write raise, ``hold`` makes writes wait until it is set."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, int]] = []
        self.fail_next = False
        self.hold = threading.Event()
        self.hold.set()

    def write(self, text: str) -> int:
        self.hold.wait(10)
        if self.fail_next:
            self.fail_next = False
            raise OSError("broken pipe")
        self.writes.append((text, threading.get_ident()))
        return len(text)

    def flush(self) -> None:
        return None

    @property
    def lines(self) -> list[str]:
        return "".join(text for text, _ in self.writes).splitlines()


@pytest.fixture
def stream() -> RecordingStream:
    return RecordingStream()


def test_routine_lines_are_written_at_once_until_gathering_starts(stream: RecordingStream) -> None:
    output = LogOutput(stream)  # type: ignore[arg-type]
    output.routine("one")
    assert stream.lines == ["one"]
    assert stream.writes[0][1] == threading.get_ident()


def test_gathered_lines_are_written_together_by_another_thread(stream: RecordingStream) -> None:
    output = LogOutput(stream)  # type: ignore[arg-type]
    output.gather()
    for n in range(200):
        output.routine(f"line {n}")
    wait_until(lambda: len(stream.lines) == 200, what="the gathered lines written")
    assert stream.lines == [f"line {n}" for n in range(200)]
    assert len(stream.writes) < 20  # together, not a write per line
    assert all(thread != threading.get_ident() for _, thread in stream.writes)


def test_an_urgent_line_comes_at_once_after_the_lines_gathered_before_it(
    stream: RecordingStream,
) -> None:
    output = LogOutput(stream)  # type: ignore[arg-type]
    output.gather()
    output.routine("job started")
    output.routine("job succeeded")
    output.urgent("job dead")
    assert stream.lines == ["job started", "job succeeded", "job dead"]


def test_stopping_writes_what_was_gathered_and_then_every_line_at_once(
    stream: RecordingStream,
) -> None:
    output = LogOutput(stream)  # type: ignore[arg-type]
    output.gather()
    output.routine("gathered")
    output.write_at_once()
    assert stream.lines == ["gathered"]
    output.routine("after")
    assert stream.lines == ["gathered", "after"]


def test_a_failed_write_of_gathered_lines_does_not_stop_the_writer(
    stream: RecordingStream,
) -> None:
    output = LogOutput(stream)  # type: ignore[arg-type]
    output.gather()
    stream.fail_next = True
    output.routine("lost with the broken write")
    wait_until(lambda: not stream.fail_next, what="the failed write")
    output.routine("written")
    wait_until(lambda: stream.lines == ["written"], what="the next line written")


def test_an_urgent_line_whose_write_fails_raises_to_its_caller(stream: RecordingStream) -> None:
    output = LogOutput(stream)  # type: ignore[arg-type]
    stream.fail_next = True
    with pytest.raises(OSError):
        output.urgent("job dead")


def test_a_stalled_stream_holds_at_most_max_gathered_lines(
    stream: RecordingStream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(log_output, "MAX_GATHERED", 5)
    monkeypatch.setattr(log_output, "GATHER_SECONDS", 60.0)  # the writer thread keeps away
    output = LogOutput(stream)  # type: ignore[arg-type]
    output.gather()
    stream.hold.clear()  # nobody reads the pipe
    for n in range(5):
        output.routine(f"gathered {n}")
    past = threading.Thread(target=output.routine, args=("sixth",))
    past.start()
    past.join(0.3)
    assert past.is_alive()  # written by its own thread, which waits as a direct write would
    stream.hold.set()
    past.join(10)
    wait_until(lambda: len(stream.lines) == 6, what="every line written")
    assert stream.lines[:5] == [f"gathered {n}" for n in range(5)]
