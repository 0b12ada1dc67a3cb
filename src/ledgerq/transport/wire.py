"""The redis driver's wire format, kept free of the redis client: job ids as zero-padded set
members (parsed strictly, so a foreign member is never taken for a job), the ``ZADD`` commands
that push them, and the JSON of stop requests and workflow signals (malformed messages are
dropped, never raised)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import structlog

from ledgerq.core.bulk import HintBatch

if TYPE_CHECKING:
    from ledgerq.core.job import JobHint

log = structlog.get_logger("ledgerq.transport.redis")

#: Members per ``ZADD`` command of a push.
PUSH_CHUNK = 1000
#: Digits of a member: every positive 64-bit id fits, so members sort in id order.
ID_WIDTH = 20
MAX_ID = 2**63 - 1


def encode_member(job_id: int) -> bytes:
    """The set member of ``job_id``: zero-padded, so equal scores pop the oldest first."""
    return b"%020d" % job_id


def parse_member(member: Any) -> int | None:
    """A job id from a set member, or None for anything that is not one."""
    raw = member if isinstance(member, bytes) else str(member).encode()
    if not raw or len(raw) > ID_WIDTH or not raw.isdigit():
        return None
    value = int(raw)
    return value if 0 < value <= MAX_ID else None


def zadd_commands(
    hints: Sequence[JobHint], key: Callable[[str], str]
) -> list[tuple[tuple[Any, ...], int]]:
    """The commands that push ``hints``: one ``ZADD key score member ...`` per queue and
    priority (chunked by ``PUSH_CHUNK``, an id pushed twice in one call sent once), each with
    its member count."""
    return [
        (
            ("ZADD", name, *(v for job_id in chunk for v in (priority, encode_member(job_id)))),
            len(chunk),
        )
        for name, priority, chunk in _chunks(hints, key)
    ]


def packed_zadds(hints: Sequence[JobHint], key: Callable[[str], str]) -> tuple[bytes, list[int]]:
    """The commands of ``zadd_commands`` in Redis's wire protocol (RESP), as one payload, and
    each command's member count: the bytes redis-py's ``pack_commands`` makes of them, built
    with one formatting per command instead of an encoding per argument."""
    payload: list[bytes] = []
    counts: list[int] = []
    for name, priority, chunk in _chunks(hints, key):
        encoded_name, score = name.encode(), b"%d" % priority
        payload.append(
            b"*%d\r\n$4\r\nZADD\r\n$%d\r\n%b\r\n"
            % (2 + 2 * len(chunk), len(encoded_name), encoded_name)
        )
        # One "$len score $20 member" pair per id, formatted from one template: ids are ints,
        # so "%020d" is exactly ``encode_member``.
        pair = b"$%d\r\n%b\r\n$%d\r\n%%0%dd\r\n" % (len(score), score, ID_WIDTH, ID_WIDTH)
        payload.append(pair * len(chunk) % tuple(chunk))
        counts.append(len(chunk))
    return b"".join(payload), counts


def _chunks(
    hints: Sequence[JobHint], key: Callable[[str], str]
) -> Iterator[tuple[str, int, list[int]]]:
    """The hints' ids per set and priority, in chunks of at most ``PUSH_CHUNK``: each id once,
    in order; an id given twice keeps its last priority, as a ``ZADD`` of both would."""
    grouped: dict[str, dict[int, list[int]]] = {}
    if isinstance(hints, HintBatch):  # one queue and priority: no hint object per id
        grouped[key(hints.queue)] = {hints.priority: list(dict.fromkeys(hints.ids))}
    else:
        latest: dict[str, dict[int, int]] = {}
        for hint in hints:
            latest.setdefault(key(hint.queue), {})[hint.job_id] = hint.priority
        for name, priorities in latest.items():
            by_priority = grouped[name] = {}
            for job_id, priority in priorities.items():
                by_priority.setdefault(priority, []).append(job_id)
    for name, by_priority in grouped.items():
        for priority, ids in by_priority.items():
            for start in range(0, len(ids), PUSH_CHUNK):
                yield name, priority, ids[start : start + PUSH_CHUNK]


def decode_text(value: Any) -> str:
    """A reply value (bytes or not) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)


def encode_stop(worker_id: str | None, mode: str) -> str:
    """A stop request for ``worker_id`` (None: every worker) in ``mode``."""
    return json.dumps({"worker_id": worker_id, "mode": mode})


def dispatch_stop(data: Any, handler: Callable[[str | None, str], None]) -> None:
    """Call ``handler(worker_id, mode)`` for a well-formed stop request; ignore anything else."""
    try:
        message = json.loads(data)
        worker_id, mode = message["worker_id"], message["mode"]
    except (ValueError, TypeError, KeyError):
        log.warning("ignored a malformed control message")
        return
    if mode in ("graceful", "immediate") and (worker_id is None or isinstance(worker_id, str)):
        handler(worker_id, mode)


def encode_workflow_ids(workflow_ids: Sequence[str]) -> str:
    """A signal that ``workflow_ids`` have new feed events."""
    return json.dumps(sorted(workflow_ids))


def dispatch_workflow_ids(data: Any, handler: Callable[[list[str]], None]) -> None:
    """Call ``handler(workflow_ids)`` for a well-formed workflow signal; ignore anything else."""
    try:
        ids = json.loads(decode_text(data))
    except ValueError:
        return
    if isinstance(ids, list):
        handler([str(i) for i in ids])
