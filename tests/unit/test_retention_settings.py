"""The history tables' retention settings reach the reconciler's policy, and bad ages are
refused at start."""

from __future__ import annotations

import pytest

from ledgerq.app.wiring import reconcile_policy
from ledgerq.config.settings import load_settings
from ledgerq.core import errors
from ledgerq.core.retention import DAY, HistoryRetention


def test_every_history_age_comes_from_its_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGERQ_RETENTION_BATCHES", "3600")
    settings = load_settings(
        retention_health_checks=60.0,
        retention_failover_events=120.0,
        retention_assignments=180.0,
        retention_schedule_runs=240.0,
        retention_job_items=300.0,
    )
    history = reconcile_policy(settings).history
    assert history.ages() == {
        "worker_health_checks": 60.0,
        "failover_events": 120.0,
        "job_assignments": 180.0,
        "schedule_runs": 240.0,
        "job_items": 300.0,
        "batches": 3600.0,
    }
    defaults = reconcile_policy(load_settings(retention_batches=None)).history
    assert defaults.health_checks_seconds == 7 * DAY == HistoryRetention().health_checks_seconds


@pytest.mark.parametrize("bad", ["0", "-5", "nan", "inf", "soon"])
def test_a_bad_age_is_refused(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("LEDGERQ_RETENTION_JOB_ITEMS", bad)
    with pytest.raises(errors.ConfigError, match="retention_job_items"):
        load_settings()
