"""The columnar forms of a bulk enqueue: a ``JobBatch`` reads as the ``NewJob``s it stands
for, a ``HintBatch`` as its ``JobHint``s, and both take the fast paths to the same rows and
``ZADD`` commands as the object-per-job forms."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import sqlalchemy as sa

from ledgerq.core.bulk import HintBatch, JobBatch
from ledgerq.core.job import JobHint, NewJob
from ledgerq.store.drivers import driver_for
from ledgerq.store.job_rows import bulk_rows
from ledgerq.store.postgres import copy_insert
from ledgerq.transport import wire

TEMPLATE = NewJob(
    task="app.send", queue="mail", args_json="{}", priority=3, max_attempts=5, delay_seconds=2.5
)
ARGS = ['{"args":[1],"kwargs":{}}', '{"args":["a\\tb"],"kwargs":{}}', '{"args":[3],"kwargs":{}}']


def _one_by_one() -> list[NewJob]:
    return [replace(TEMPLATE, args_json=args) for args in ARGS]


def test_a_job_batch_reads_as_its_jobs() -> None:
    batch = JobBatch(TEMPLATE, list(ARGS))
    assert len(batch) == 3
    assert list(batch) == _one_by_one()
    assert batch[1] == _one_by_one()[1]
    assert list(batch[1:]) == _one_by_one()[1:]


def test_a_job_batch_gives_the_rows_of_its_jobs() -> None:
    dialect = driver_for(sa.create_engine("sqlite://"))
    assert bulk_rows(dialect, JobBatch(TEMPLATE, list(ARGS))) == bulk_rows(dialect, _one_by_one())


def test_copy_text_formats_shared_columns_once_and_each_row_exactly() -> None:
    now = datetime(2026, 12, 7, 6, 0, tzinfo=UTC)
    rows = [
        {"queue": "mail", "task": "app.send", "args": ARGS[0], "priority": 3, "state": "scheduled",
         "max_attempts": 5, "timeout_seconds": None, "delay_s": 2.5},
        {"queue": "mail", "task": "app.send", "args": ARGS[1], "priority": 3, "state": "scheduled",
         "max_attempts": 5, "timeout_seconds": None, "delay_s": 2.5},
        {"queue": "sms", "task": "app.sms", "args": ARGS[2], "priority": 0, "state": "queued",
         "max_attempts": 3, "timeout_seconds": 7, "delay_s": 0.0},
    ]  # fmt: skip
    created = now.isoformat()
    due = "2026-12-07T06:00:02.500000+00:00"
    assert copy_insert._copy_text(rows, [10, 11, 12], now).splitlines() == [
        f'10\tmail\tapp.send\t{{"args":[1],"kwargs":{{}}}}\t3\tscheduled\t5\t\\N\t{due}\t{created}',
        f'11\tmail\tapp.send\t{{"args":["a\\\\tb"],"kwargs":{{}}}}\t3\tscheduled\t5\t\\N\t{due}\t{created}',
        f'12\tsms\tapp.sms\t{{"args":[3],"kwargs":{{}}}}\t0\tqueued\t3\t7.0\t{created}\t{created}',
    ]


def test_a_hint_batch_reads_as_its_hints() -> None:
    batch = HintBatch([4, 5, 6], "mail", 2)
    assert list(batch) == [JobHint(4, "mail", 2), JobHint(5, "mail", 2), JobHint(6, "mail", 2)]
    assert list(batch[1:]) == [JobHint(5, "mail", 2), JobHint(6, "mail", 2)]
    assert len(batch) == 3


def test_a_hint_batch_pushes_the_same_commands_as_its_hints() -> None:
    def key(queue: str) -> str:
        return f"lq:q:{queue}"

    ids = [*range(1, wire.PUSH_CHUNK + 6), 7]  # two commands, and an id given twice
    batch = HintBatch(ids, "mail", 2)
    commands = wire.zadd_commands(batch, key)
    assert commands == wire.zadd_commands(list(batch), key)
    assert [count for _, count in commands] == [wire.PUSH_CHUNK, 5]
    assert commands[0][0][:4] == ("ZADD", "lq:q:mail", 2, wire.encode_member(1))


def test_a_batchs_packed_push_is_what_redis_py_packs_of_its_commands() -> None:
    from redis.connection import Connection

    def key(queue: str) -> str:
        return f"lq:q:{queue}"

    packer = Connection()  # never connected: only its encoder is used
    for batch in (
        HintBatch([*range(1, wire.PUSH_CHUNK + 6), 7], "mail", 2),
        HintBatch([2**63 - 1, 42], "größe", -5),
    ):
        payload, counts = wire.packed_zadds(batch, key)
        commands = wire.zadd_commands(batch, key)
        assert payload == b"".join(packer.pack_commands([args for args, _ in commands]))
        assert counts == [count for _, count in commands]


def test_a_mixed_push_is_one_command_per_queue_and_priority() -> None:
    hints = [JobHint(1, "a", 0), JobHint(2, "b", 0), JobHint(3, "a", 1), JobHint(1, "a", 1)]
    payload, counts = wire.packed_zadds(hints, lambda queue: queue)
    assert counts == [2, 1]  # a: ids 1 and 3 at priority 1; b: id 2 at priority 0
    assert payload.count(b"ZADD") == 2
    from redis.connection import Connection

    commands = [args for args, _ in wire.zadd_commands(hints, lambda queue: queue)]
    assert payload == b"".join(Connection().pack_commands(commands))
    assert payload.startswith(b"*6\r\n$4\r\nZADD\r\n$1\r\na\r\n$1\r\n1\r\n$20\r\n")
