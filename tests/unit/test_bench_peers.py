"""The bench's peers' folder (benchmark/peers.py): the project's own extra peers (huey on
SQLite) are copied beside the peers' harness, so ``--peers huey_sqlite`` finds them."""

from __future__ import annotations

import ast
from pathlib import Path

from ledgerq.benchmark import peers

#: What harness.py's docstring asks of every bench_<peer>.py.
PROTOCOL = {
    "NAME",
    "BULK_LABEL",
    "reset",
    "enqueue_single",
    "enqueue_bulk",
    "prefill",
    "paced",
    "worker_cmds",
}


def peers_source(root: Path) -> Path:
    source = root / "shared" / "peers"
    source.mkdir(parents=True)
    (source / "harness.py").write_text("# the harness\n")
    (source / "bench_huey.py").write_text("NAME = 'huey'\n")
    return source


def test_extra_peers_are_copied_beside_the_harness_and_listed(tmp_path: Path) -> None:
    dest = peers.sync(peers_source(tmp_path), tmp_path / "scratch")
    assert (dest / "bench_huey_sqlite.py").read_bytes() == (
        peers.EXTRA_PEERS_DIR / "bench_huey_sqlite.py"
    ).read_bytes()
    assert {"huey", "huey_sqlite"} <= set(peers.available(dest))
    assert "huey_sqlite" not in peers.DEFAULT_PEERS  # measured when asked for by name


def test_a_peer_of_the_peers_folder_wins_over_an_extra_of_the_same_name(tmp_path: Path) -> None:
    source = peers_source(tmp_path)
    (source / "bench_huey_sqlite.py").write_text("NAME = 'theirs'\n")
    dest = peers.sync(source, tmp_path / "scratch")
    assert (dest / "bench_huey_sqlite.py").read_text() == "NAME = 'theirs'\n"


def test_a_stale_copy_of_an_extra_is_refreshed(tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "bench_mine.py").write_text("NAME = 'mine'  # v1\n")
    (extra / "notes.txt").write_text("not a peer\n")
    source = peers_source(tmp_path)
    peers.sync(source, tmp_path / "scratch", extra)
    (extra / "bench_mine.py").write_text("NAME = 'mine'  # v2\n")
    dest = peers.sync(source, tmp_path / "scratch", extra)
    assert (dest / "bench_mine.py").read_text() == "NAME = 'mine'  # v2\n"
    assert not (dest / "notes.txt").exists()
    assert (dest / "bench_mine.py").stat().st_mode & 0o777 == 0o644


def test_every_extra_peer_follows_the_harness_protocol() -> None:
    found = sorted(peers.EXTRA_PEERS_DIR.glob("bench_*.py"))
    assert [p.name for p in found] == ["bench_huey_sqlite.py"]
    for path in found:
        tree = ast.parse(path.read_text())
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        names |= {
            t.id
            for n in tree.body
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        assert names >= PROTOCOL, f"{path.name} lacks {sorted(PROTOCOL - names)}"
        assert f'NAME = "{path.stem.removeprefix("bench_")}"' in path.read_text()
