# The two commands of the README, and a few more for developers.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench dev clean

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

# Browse the demo's Dagster instance (after `make demo`); the sensor keeps the demo exports running.
dev: $(STAMP)
	SEQEXPORT_HOME=$(CURDIR)/.demo SEQEXPORT_ALLOW_LOCAL=1 DAGSTER_HOME=$(CURDIR)/.demo/dagster_home \
		$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

clean:
	rm -rf .demo .seqexport
