# The two commands of the README, and a few more for developers.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench sim sim-long dev clean

$(STAMP): pyproject.toml setup.py seqexport_dagster/source/_sqlite_columns.c seqexport_dagster_tests/support/duckdb_httpfs.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	./.ci/prepare-build $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	# DuckDB's httpfs extension is on PyPI only for DuckDB 1.5.5, the suite runs 2.0: a folder of its own
	# for the docs' s3:// statements (seqexport_dagster_tests/support/duckdb_httpfs.py).
	$(BIN)/pip install --quiet --upgrade --target $(VENV)/duckdb-httpfs -r seqexport_dagster_tests/support/duckdb_httpfs.txt
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/seqexport demo

# No inherited proxies for the tests: every server they talk to is on 127.0.0.1.
NO_PROXY_ENV := env -u HTTP_PROXY -u HTTPS_PROXY -u http_proxy -u https_proxy -u ALL_PROXY -u all_proxy

# Test processes (pytest-xdist workers); a file's tests stay on one worker (seqexport_dagster_tests/conftest.py).
# Three on this 2-core kind of host: the end-to-end tests spend most of their time waiting on servers,
# daemons and ticks (about a third of their wall time is CPU), and a third worker uses that time.
TEST_JOBS ?= 3

# Installs into .venv, starts PostgreSQL and installs chromium when missing (.ci/prepare-test), lints,
# type-checks and runs every test, on TEST_JOBS workers.
test: $(STAMP)
	./.ci/prepare-test
	$(BIN)/ruff check seqexport_dagster seqexport_dagster_tests benchmarks
	$(BIN)/mypy
	$(NO_PROXY_ENV) $(BIN)/pytest -q -n $(TEST_JOBS) --durations=25

# The inner loop: every test but those marked `slow` (end-to-end servers, Dagster daemons, the
# browser, the simulator's seeds, the heaviest files: conftest.SLOW_WEIGHT), no lint; `make test`
# runs them all.
test-fast: $(STAMP)
	$(NO_PROXY_ENV) $(BIN)/pytest -q -n $(TEST_JOBS) -m "not slow"

lint: $(STAMP)
	$(BIN)/ruff check seqexport_dagster seqexport_dagster_tests benchmarks
	$(BIN)/ruff format --check seqexport_dagster
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m benchmarks

# The seeded simulator (docs/operators.md): new seeds for SECONDS seconds (default 60), e.g.
# `SECONDS=600 make sim`; prints export-days per CPU-second, what it found, and how to reproduce it.
sim: $(STAMP)
	$(BIN)/python -m seqexport_dagster_tests.support.sim --seconds $(or $(SECONDS),60)

# The long run (issue 22): new seeds until EXPORT_DAYS simulated export-days (default 10000), in JOBS
# processes (default 2), from FIRST_SEED (default random); a progress line every minute, then the
# totals: rows lost, duplicated, objects replaced, export-days per CPU-second, each failing seed.
sim-long: $(STAMP)
	$(BIN)/python -m seqexport_dagster_tests.support.sim --export-days $(or $(EXPORT_DAYS),10000) \
		--jobs $(or $(JOBS),2) $(if $(FIRST_SEED),--first-seed $(FIRST_SEED))

# Browse the demo's Dagster instance at http://127.0.0.1:3000 (runs `make demo` first if there is none);
# the UI and the daemon run until Ctrl-C or SIGTERM, and the sensor keeps the demo exports running
# meanwhile. deploy/run_in_group.py runs `dg dev` in a process group of its own, passes Ctrl-C and
# SIGTERM on to it and to everything it started, and SIGKILLs what is left after DEV_GRACE seconds.
DEMO ?= $(CURDIR)/.demo
DEV_PORT ?= 3000
DEV_GRACE ?= 20
dev: $(STAMP)
	test -f $(DEMO)/dagster_home/dagster.yaml || $(BIN)/seqexport demo --home $(DEMO)
	SEQEXPORT_HOME=$(DEMO) SEQEXPORT_ALLOW_LOCAL=1 DAGSTER_HOME=$(DEMO)/dagster_home \
		exec $(BIN)/python $(CURDIR)/deploy/run_in_group.py --grace $(DEV_GRACE) -- \
		$(BIN)/dg dev -w $(CURDIR)/workspace.yaml -h 127.0.0.1 -p $(DEV_PORT)

clean:
	rm -rf .demo .seqexport
