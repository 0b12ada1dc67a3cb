"""Multi-host PostgreSQL URLs (a primary and its standbys): both spellings operators use are
accepted and reach psycopg as libpq's host and port lists; passwords stay masked."""

from __future__ import annotations

import pytest

from ledgerq.core import errors
from ledgerq.core.redaction import mask_url
from ledgerq.store.engine import create_engine

WANTED = {
    "host": "db1,db2",
    "port": "5432,5433",
    "dbname": "ledger",
    "target_session_attrs": "read-write",
}


@pytest.mark.parametrize(
    "url",
    [
        # SQLAlchemy's spelling: the hosts in the query.
        "postgresql://app:pw@/ledger?host=db1:5432&host=db2:5433&target_session_attrs=read-write",
        # libpq's spelling: the hosts in the authority, comma-separated.
        "postgresql://app:pw@db1:5432,db2:5433/ledger?target_session_attrs=read-write",
        "postgresql+psycopg://app:pw@db1:5432,db2:5433/ledger?target_session_attrs=read-write",
    ],
)
def test_a_multi_host_url_reaches_psycopg_as_host_and_port_lists(url: str) -> None:
    engine = create_engine(url)  # connects lazily: nothing listens on these hosts
    try:
        _, kwargs = engine.dialect.create_connect_args(engine.url)
    finally:
        engine.dispose()
    assert {k: kwargs.get(k) for k in WANTED} == WANTED
    assert kwargs["user"] == "app" and kwargs["password"] == "pw"
    assert "pw" not in mask_url(url).replace("psycopg", "")


def test_libpq_spelling_without_credentials_or_query() -> None:
    engine = create_engine("postgresql://db1,db2/ledger")
    try:
        _, kwargs = engine.dialect.create_connect_args(engine.url)
    finally:
        engine.dispose()
    assert kwargs["host"] == "db1,db2" and kwargs["dbname"] == "ledger"


def test_a_malformed_port_is_still_a_clear_error_with_the_password_masked() -> None:
    with pytest.raises(errors.ConfigError, match="invalid database URL") as caught:
        create_engine("postgresql://app:secret-pw@db1:port/ledger")
    assert "secret-pw" not in str(caught.value)
