"""The redis driver's wire format, kept free of the redis client: job ids as zero-padded set
members (parsed strictly, so a foreign member is never taken for a job), the ``ZADD`` commands
that push them, and the JSON of stop requests and workflow signals (malformed messages are
dropped, never raised)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
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
    """The commands that push ``hints``: one ``ZADD key score member ...`` per queue (chunked
    by ``PUSH_CHUNK``, an id pushed twice in one call sent once), each with its member count."""
    by_key: dict[str, dict[bytes, int]] = {}
    if isinstance(hints, HintBatch):  # one queue and priority: no hint object per id
        by_key[key(hints.queue)] = dict.fromkeys(map(encode_member, hints.ids), hints.priority)
    else:
        for hint in hints:
            by_key.setdefault(key(hint.queue), {})[encode_member(hint.job_id)] = hint.priority
    commands: list[tuple[tuple[Any, ...], int]] = []
    for name, members in by_key.items():
        items = list(members.items())
        for start in range(0, len(items), PUSH_CHUNK):
            chunk = items[start : start + PUSH_CHUNK]
            pairs = (value for member, score in chunk for value in (score, member))
            commands.append((("ZADD", name, *pairs), len(chunk)))
    return commands


def packed_zadds(hints: Sequence[JobHint], key: Callable[[str], str]) -> tuple[bytes, list[int]]:
    """The ``ZADD`` commands that push ``hints`` in Redis's wire protocol (RESP), as one
    payload, and each command's member count: one command per queue and priority (chunked by
    ``PUSH_CHUNK``, an id given twice sent once). For a batch of one queue and priority these
    are the bytes redis-py's ``pack_commands`` makes of ``zadd_commands``, built with one
    formatting per command instead of an encoding per argument."""
    payload: list[bytes] = []
    counts: list[int] = []
    for name, by_score in _members_by_key(hints, key).items():
        encoded_name = name.encode()
        for score, ids in by_score.items():
            # One "$len score $20 member" pair per id, formatted from one template: ids are
            # ints, so "%020d" is exactly ``encode_member``.
            pair = b"$%d\r\n%b\r\n$%d\r\n%%0%dd\r\n" % (len(score), score, ID_WIDTH, ID_WIDTH)
            for start in range(0, len(ids), PUSH_CHUNK):
                chunk = ids[start : start + PUSH_CHUNK]
                payload.append(
                    b"*%d\r\n$4\r\nZADD\r\n$%d\r\n%b\r\n"
                    % (2 + 2 * len(chunk), len(encoded_name), encoded_name)
                )
                payload.append(pair * len(chunk) % tuple(chunk))
                counts.append(len(chunk))
    return b"".join(payload), counts


def _members_by_key(
    hints: Sequence[JobHint], key: Callable[[str], str]
) -> dict[str, dict[bytes, list[int]]]:
    """The hints' ids per set and score (the priority, as Redis reads it), each id once, in
    order; an id given twice keeps its last priority, as a ``ZADD`` of both would."""
    if isinstance(hints, HintBatch):  # one queue and priority: no hint object per id
        return {key(hints.queue): {b"%d" % hints.priority: list(dict.fromkeys(hints.ids))}}
    latest: dict[str, dict[int, int]] = {}
    for hint in hints:
        latest.setdefault(key(hint.queue), {})[hint.job_id] = hint.priority
    grouped: dict[str, dict[bytes, list[int]]] = {}
    for name, priorities in latest.items():
        by_score = grouped[name] = {}
        for job_id, priority in priorities.items():
            by_score.setdefault(b"%d" % priority, []).append(job_id)
    return grouped


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
