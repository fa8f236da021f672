# convlog — the two commands: `make demo` (embedded, no Kafka/Java/Docker) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
RUNTIME := $(VENV)/.runtime-stamp
SERVICES := $(BIN)/python -m devservices

.PHONY: help install demo test check lint typecheck docs pytest services-up services-down services-status bench clean

help:
	@echo "make demo           run convlog on embedded defaults (no Kafka, Java or Docker needed)"
	@echo "make test           install, start Kafka + Postgres locally, lint, type-check, run every test"
	@echo "make services-up    start the local Kafka (KRaft) and Postgres on loopback (BROKERS=3: a 3-node cluster)"
	@echo "make services-down  stop them"
	@echo "make docs           build the documentation site into .site/ (mkdocs, strict)"
	@echo "make bench          run the benchmarks in bench/ (needs services-up)"

# `make demo` installs what the product runs (the package and its runtime dependencies);
# `make test` adds the dev tools (pytest, mypy, ruff, mkdocs, the frameworks the adapters are tested with).
$(RUNTIME): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	@touch $(RUNTIME)

$(STAMP): pyproject.toml $(RUNTIME)
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

demo: $(RUNTIME)
	$(BIN)/convlog demo

# BROKERS=3: a three-node Kafka cluster; unset, the layout the last `up` started (else one broker).
services-up: install
	$(SERVICES) up $(if $(BROKERS),--brokers $(BROKERS))

services-down:
	@if [ -x $(BIN)/python ]; then $(SERVICES) down; fi

services-status: install
	$(SERVICES) status

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: install
	$(BIN)/mypy
	$(BIN)/mypy examples/python  # the examples, as strictly (mypy takes packages or files, not both)

# The documentation site (mkdocs.yml): strict, so a broken link or anchor, or a page left out, fails.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Runs the suite against the local services; exports their addresses for the tests.
pytest: install
	eval "$$($(SERVICES) env)" && $(BIN)/pytest $(PYTEST_ARGS)

check: lint typecheck docs

test: install services-up check pytest

bench: install services-up
	eval "$$($(SERVICES) env)" && for b in produce project rebuild context http_path turn cache; do \
	  $(BIN)/python bench/$$b.py || exit 1; done

clean: services-down
	rm -rf $(VENV) .convlog .pytest_cache .mypy_cache .ruff_cache .site
