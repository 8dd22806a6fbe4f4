# The two commands of the README, and a few more for developers.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench sim dev clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/seqexport demo

test: $(STAMP)
	$(BIN)/ruff check seqexport_dagster seqexport_dagster_tests benchmarks
	$(BIN)/mypy
	$(BIN)/pytest -q

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

# Browse the demo's Dagster instance at http://127.0.0.1:3000 (runs `make demo` first if there is none);
# the UI and the daemon run until Ctrl-C, and the sensor keeps the demo exports running meanwhile.
dev: $(STAMP)
	test -f .demo/dagster_home/dagster.yaml || $(BIN)/seqexport demo
	SEQEXPORT_HOME=$(CURDIR)/.demo SEQEXPORT_ALLOW_LOCAL=1 DAGSTER_HOME=$(CURDIR)/.demo/dagster_home \
		$(BIN)/dg dev -w $(CURDIR)/workspace.yaml -h 127.0.0.1 -p 3000

clean:
	rm -rf .demo .seqexport
