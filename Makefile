# The user's entry points. Each target creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test bench lint screenshots install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Byte-compile once: with PYTHONDONTWRITEBYTECODE set, every worker start would otherwise
# recompile SQLAlchemy and friends (about a second per process).
COMPILE = $(BIN)/python -m compileall -q -j 0 $(VENV)/lib src > /dev/null || true

install: $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(COMPILE)

install-test: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	$(COMPILE)

## make demo: run a realistic mixed workload on an embedded SQLite file
demo: install
	$(BIN)/ledgerq demo

## make test: the whole suite against SQLite, PostgreSQL and MariaDB (services on loopback)
test: install-test
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

## make bench: ledgerq side by side with the peer queues, as ratios
bench: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(COMPILE)
	$(BIN)/ledgerq bench

## make lint: ruff, mypy and the import-layer contract
lint: install-test
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy
	$(BIN)/lint-imports

## make screenshots: the dashboard's pages as docs/dashboard-<page>.png (headless Chromium)
screenshots: install-test
	LEDGERQ_TEST_SCREENSHOT_DIR=docs $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/admin/test_dashboard_browser.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
