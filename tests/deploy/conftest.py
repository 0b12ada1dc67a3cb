"""Fixtures of the deployment suite: a migrated PostgreSQL ledger, the shipped example app in
a folder of its own, and a process starter that kills leftovers before the ledger is dropped."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deploy.deploy_files import DEPLOY, Services


@pytest.fixture
def pg_url(make_database_url: Callable[[str], str]) -> str:
    """A migrated ledger on PostgreSQL (the database the shipped files are written for)."""
    return make_database_url("postgresql")


@pytest.fixture
def services(tmp_path: Path, make_database_url: Callable[[str], str]) -> Iterator[Services]:
    """Starts processes; depends on ``make_database_url`` so that every process is dead
    before the test's databases are dropped."""
    started = Services(tmp_path)
    try:
        yield started
    finally:
        started.kill_all()


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A copy of deploy/docker/app (the shipped example tasks, ``tasks:app``): the working
    directory the units and programs point at (/opt/ledgerq/app)."""
    target = tmp_path / "app"
    shutil.copytree(DEPLOY / "docker" / "app", target)
    return target
