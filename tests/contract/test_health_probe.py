"""The HealthProbe contract, over every implementation (``HEALTH_PROBES``): a check reports
whether its dependency answers now and never raises; a failure says why."""

from __future__ import annotations

from tests.contract.conftest import Probes


def test_a_check_reports_ok_when_the_dependency_answers(probes: Probes) -> None:
    result = probes.up()
    assert result.ok and result.name


def test_a_check_of_an_unreachable_dependency_fails_with_a_reason_and_never_raises(
    probes: Probes,
) -> None:
    result = probes.down()
    assert not result.ok and result.name == probes.up().name
    assert result.detail
