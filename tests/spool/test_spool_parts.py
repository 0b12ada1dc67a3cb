"""The enqueue spool's parts: the spool contract over both adapters (Redis lists, a folder of
files), the entry format, the replay's exactly-once on every backend (a replay repeated after
a crash between commit and removal creates nothing new), settings and CLI errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ledgerq import LedgerQ
from ledgerq.cli.main import main
from ledgerq.config.settings import load_settings
from ledgerq.core import errors, spool
from ledgerq.core.job import NewJob
from ledgerq.producer.spooler import Spooler
from ledgerq.transport.file_spool import FileSpool
from ledgerq.transport.redis_spool import RedisSpool
from tests.redis_server import RedisServer


@pytest.fixture(params=["redis", "file"])
def make_spool(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[], spool.Spool]]:
    """A factory of spools over one shared medium (two instances see the same entries)."""
    if request.param == "file":
        yield lambda: FileSpool(tmp_path / "spool")
        return
    server = RedisServer(tmp_path)
    clients: list[Any] = []

    def make() -> RedisSpool:
        client = server.client()
        clients.append(client)
        return RedisSpool(client, namespace="t")

    try:
        yield make
    finally:
        for client in clients:
            client.close()
        server.stop()


def test_entries_keep_their_order_and_leave_only_when_removed(
    make_spool: Callable[[], spool.Spool],
) -> None:
    target = make_spool()
    for n in range(5):
        target.append("p1", f"entry-{n}")
    target.append("p2", "other")
    assert set(target.producers()) == {"p1", "p2"}
    assert target.peek("p1", 3) == ["entry-0", "entry-1", "entry-2"]
    assert target.size("p1") == 5
    target.remove("p1", 2)
    assert target.peek("p1", 10) == ["entry-2", "entry-3", "entry-4"]
    # A second instance (another process) sees the same entries, in the same order.
    assert make_spool().peek("p1", 10) == ["entry-2", "entry-3", "entry-4"]
    with target.hold("p1") as held:
        assert held
        target.remove("p1", 3)
    assert target.size("p1") == 0
    assert target.producers() == ["p2"]


def test_one_drainer_at_a_time_per_producer(make_spool: Callable[[], spool.Spool]) -> None:
    first = make_spool()
    second = make_spool()
    first.append("p", "entry")
    with first.hold("p") as held:
        assert held
        with second.hold("p") as also:
            assert not also
        with second.hold("q") as other:
            assert other  # another producer is free
    with second.hold("p") as held:
        assert held  # released with the block


def test_an_entry_keeps_every_option() -> None:
    run_at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    jobs = [
        NewJob(
            task="t",
            queue="mail",
            args_json='{"args":[1],"kwargs":{}}',
            priority=-3,
            max_attempts=7,
            run_at=run_at,
            dedupe_key="mine",
            timeout_seconds=2.5,
            held=True,
            expires_at=run_at + timedelta(hours=1),
            dedupe_for_seconds=60.0,
        ),
        NewJob(task="u", queue="default", args_json='{"args":[],"kwargs":{}}', delay_seconds=4),
    ]
    text = spool.encode_entry(jobs)
    assert spool.decode_entry(text) == jobs
    # An entry read back is checked like a request (a Redis spool can be written by others).
    forged = [
        text.replace('"mail"', '"bad queue"'),
        text.replace('"held":true', '"held":1'),
        text.replace('"priority":-3', '"priority":"x"'),
        text.replace('{\\"args\\":[1],\\"kwargs\\":{}}', "[1]"),
        text.replace('"task":"t",', ""),
    ]
    assert all(f != text for f in forged)
    for bad in ("not json", '{"v": 99, "jobs": []}', '{"v": 1}', *forged):
        with pytest.raises(errors.SpoolCorrupt):
            spool.decode_entry(bad)


def test_keys_are_added_only_where_the_caller_gave_none() -> None:
    plain = NewJob(task="t", queue="default", args_json="{}")
    own = NewJob(task="t", queue="default", args_json="{}", dedupe_key="mine")
    serial = iter(range(1, 10))
    keyed = spool.key_jobs([plain, own, plain], "prod", lambda: next(serial))
    assert [j.idempotency_key for j in keyed] == ["spool:prod:1", None, "spool:prod:2"]
    assert keyed[0].idempotency_for_seconds == spool.KEY_WINDOW_SECONDS
    assert keyed[0].dedupe_key is None
    assert keyed[1] == own  # the caller's key keeps its own meaning


def test_a_repeated_replay_creates_nothing_new(database_url: str, tmp_path: Path) -> None:
    app = LedgerQ(database_url=database_url)
    try:
        store = app.parts.store
        target = FileSpool(tmp_path / "spool")
        spooler = Spooler(target, store, producer="prod")
        jobs = spooler.key(
            [
                NewJob(task="t", queue="default", args_json=f'{{"args":[{n}],"kwargs":{{}}}}')
                for n in range(3)
            ]
        )
        entry = spool.encode_entry(jobs)
        target.append("prod", entry)
        with target.hold("prod"):
            assert list(spool.replay(target, store, "prod")) == [3]
        first = app.client.list(limit=10)
        assert len(first) == 3
        # A drainer that crashed after the commit and before the removal replays it again,
        # even once the jobs finished: the keys' windows make every one a duplicate.
        with store.engine.begin() as conn:
            conn.exec_driver_sql("UPDATE jobs SET state = 'succeeded'")
        target.append("prod", entry)
        results = store.insert_jobs(spool.decode_entry(target.peek("prod", 1)[0]))
        assert [r.duplicate for r in results] == [True, True, True]
        assert sorted(r.job_id for r in results) == sorted(j.id for j in first)
        assert len(app.client.list(limit=10)) == 3
    finally:
        app.close()


def test_bad_spool_settings_are_refused() -> None:
    with pytest.raises(errors.ConfigError, match="spool must be off, redis, or file:/path"):
        load_settings(spool="s3")
    with pytest.raises(errors.ConfigError, match="spool=redis needs redis_url"):
        load_settings(spool="redis")
    assert load_settings(spool="file").spool == "file"
    assert load_settings(spool="file:/var/lib/ledgerq/spool").spool.endswith("/spool")


def test_spool_commands_need_a_spool(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", f"sqlite:///{tmp_path / 'l.db'}")
    monkeypatch.delenv("LEDGERQ_SPOOL", raising=False)
    assert main(["spool", "status"]) == 1
    err = capsys.readouterr().err
    assert "no enqueue spool is configured" in err and "Traceback" not in err


def test_spool_status_counts_jobs_per_producer(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "spool"
    job = NewJob(task="t", queue="default", args_json="{}")
    FileSpool(folder).append("prod", spool.encode_entry([job, job]))
    FileSpool(folder).append("prod", spool.encode_entry([job]))
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", f"sqlite:///{tmp_path / 'l.db'}")
    monkeypatch.setenv("LEDGERQ_SPOOL", f"file:{folder}")
    assert main(["spool", "status", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["jobs"] == 3 and shown["entries"] == 2
    assert shown["producers"] == [{"producer": "prod", "entries": 2, "jobs": 3}]
    assert main(["spool", "status"]) == 0
    assert "prod: 3 job(s) in 2 enqueue(s)" in capsys.readouterr().out


def test_validate_config_checks_that_the_spool_can_be_written(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    assert main(["--database-url", url, "db", "migrate"]) == 0
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", url)
    monkeypatch.setenv("LEDGERQ_SPOOL", f"file:{tmp_path / 'spool'}")
    capsys.readouterr()
    assert main(["worker", "validate-config", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []
    assert list((tmp_path / "spool").iterdir()) == []  # its trial folder is gone
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("LEDGERQ_SPOOL", f"file:{tmp_path / 'not-a-folder'}")
    assert main(["worker", "validate-config", "--json"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len(problems) == 1 and problems[0].startswith("spool: spool folder")
