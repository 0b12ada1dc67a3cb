"""``DB_POOLER`` and ``DATABASE_DIRECT_URL``: checked at start, with a clear error for a
combination that cannot work (the pooler mode itself runs in the contract suite)."""

from __future__ import annotations

import pytest

from ledgerq.app.wiring import database_pooler
from ledgerq.config.settings import load_settings
from ledgerq.core import errors
from ledgerq.store.dialects import Pooler, pooler_of
from ledgerq.store.engine import create_engine

DIRECT = "postgresql://ledgerq:secret@db:5432/ledgerq"


def test_the_pooler_and_its_direct_url_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEDGERQ_DATABASE_URL", "postgresql://ledgerq@bouncer:6432/ledgerq")
    monkeypatch.setenv("LEDGERQ_DB_POOLER", "pgbouncer")
    monkeypatch.setenv("LEDGERQ_DATABASE_DIRECT_URL", DIRECT)
    settings = load_settings()
    assert database_pooler(settings) == Pooler("pgbouncer", DIRECT)
    assert "secret" not in str(settings.masked()["database_direct_url"])
    monkeypatch.delenv("LEDGERQ_DATABASE_DIRECT_URL")
    assert database_pooler(load_settings(db_pooler="none")) is None


def test_a_direct_url_without_a_pooler_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="only used with db_pooler=pgbouncer"):
        load_settings(database_direct_url=DIRECT)


def test_an_unknown_pooler_is_refused() -> None:
    with pytest.raises(errors.ConfigError, match="db_pooler"):
        load_settings(db_pooler="pgpool")


@pytest.mark.parametrize("url", ["sqlite:///ledger.db", "mariadb://root@127.0.0.1/test"])
def test_the_pooler_mode_is_postgresql_only(url: str) -> None:
    with pytest.raises(errors.ConfigError, match="needs a PostgreSQL database URL"):
        create_engine(url, pooler=Pooler())


def test_a_pooled_engine_sends_no_session_options() -> None:
    engine = create_engine(
        "postgresql://u@127.0.0.1:6432/db?options=-cwork_mem%3D8MB", pooler=Pooler()
    )
    try:
        assert pooler_of(engine) == Pooler()
        _, kwargs = engine.dialect.create_connect_args(engine.url)
        # Only the URL's own options (the operator's choice), none of ledgerq's.
        assert kwargs["options"] == "-cwork_mem=8MB"
    finally:
        engine.dispose()
    direct = create_engine("postgresql://u@127.0.0.1:5432/db")
    try:
        assert pooler_of(direct) is None
        _, kwargs = direct.dialect.create_connect_args(direct.url)
        assert "-ctimezone=UTC" in kwargs["options"]
    finally:
        direct.dispose()
