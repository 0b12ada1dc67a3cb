"""Settings: environment parsing, validation at start, secrets masked."""

from __future__ import annotations

import types

import pytest

import ledgerq
from ledgerq.config.settings import load_settings
from ledgerq.core import errors


def test_environment_is_read_and_arguments_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERQ_QUEUES", "sms, mail")
    monkeypatch.setenv("LEDGERQ_CONCURRENCY", "4")
    settings = load_settings(concurrency=2)
    assert settings.queues == ("sms", "mail")
    assert settings.concurrency == 2


def test_unknown_variable_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERQ_CONCURENCY", "4")
    with pytest.raises(errors.ConfigError, match="LEDGERQ_CONCURENCY"):
        load_settings()


@pytest.mark.parametrize(
    ("name", "value"), [("concurrency", 0), ("queues", "bad queue"), ("log_format", "xml")]
)
def test_invalid_values_are_one_clear_config_error(name: str, value: object) -> None:
    with pytest.raises(errors.ConfigError, match=r"invalid settings|queue"):
        load_settings(**{name: value})


def test_secrets_are_masked() -> None:
    settings = load_settings(database_url="postgresql://app:hunter2@db/prod", api_token="s3cret")
    shown = settings.masked()
    assert shown["database_url"] == "postgresql://app:***@db/prod"
    assert shown["api_token"] == "***"
    assert "hunter2" not in repr(settings) and "s3cret" not in repr(settings)


def test_public_api_is_exactly_what_all_lists() -> None:
    # Submodules become attributes once imported anywhere; they are not the curated API.
    public = {
        name
        for name in dir(ledgerq)
        if not name.startswith("_") and not isinstance(getattr(ledgerq, name), types.ModuleType)
    }
    assert public == set(ledgerq.__all__)
