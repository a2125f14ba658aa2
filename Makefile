# The two commands: `make demo` and `make test`. Everything else is a convenience.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
HOME_DIR := $(CURDIR)/.dagster_home

.PHONY: install demo ui test lint clean system java maven bench soak

# The Python packages, then the jars Spark sessions get (Iceberg's runtime, the JDBC drivers),
# fetched through Maven into the jar folder (`incremental-assets jars path`) unless already there.
install: $(STAMP) maven
	$(BIN)/incremental-assets jars fetch --all

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

$(HOME_DIR)/dagster.yaml: dagster.yaml
	mkdir -p $(HOME_DIR)
	cp dagster.yaml $(HOME_DIR)/dagster.yaml

# What `make demo` and `make ui` need and nothing more: the package (no test tools), and the jars
# of the demo's configuration (`incremental-assets jars fetch` reads ./incremental_assets.yaml).
# PYTHONWARNINGS=ignore: setuptools' editable build prints a boxed warning about folders named
# like the package, whichever editable mode, on a user's first screen.
BASE_STAMP := $(VENV)/.base-installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
DEMO_TABLES := orders order_events customers

$(BASE_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	PYTHONWARNINGS=ignore $(BIN)/python -m pip install --quiet -e .
	rm -f $(VENV)/.base-installed-*
	touch $(BASE_STAMP)

# Seed the example shop's landing folder, load every table, change the source, load again, through
# the package's own command (`dagster asset materialize` would lead with Dagster's warnings about
# itself: superseded by `dg launch`, a selection parsed by a beta API).
demo: $(BASE_STAMP) maven java
	$(BIN)/incremental-assets jars fetch
	rm -rf .demo $(HOME_DIR)
	$(MAKE) --no-print-directory $(HOME_DIR)/dagster.yaml
	$(BIN)/python -m incremental_assets.demo seed .demo/landing
	@echo "== run 1: first load of every table (log in .demo/run-1.log)"
	@DAGSTER_HOME=$(HOME_DIR) $(BIN)/python -m incremental_assets.demo run .demo/run-1.log $(DEMO_TABLES)
	$(BIN)/python -m incremental_assets.demo change .demo/landing
	@echo "== run 2: only the delta (log in .demo/run-2.log)"
	@DAGSTER_HOME=$(HOME_DIR) $(BIN)/python -m incremental_assets.demo run .demo/run-2.log $(DEMO_TABLES)
	@DAGSTER_HOME=$(HOME_DIR) $(BIN)/python -m incremental_assets.demo report

# The Dagster UI on the same instance the demo used, beside a warm shared Spark engine that its
# runs use (spark: {engine: shared}). One Ctrl-C stops both: `incremental_assets.ui` runs
# `dagster dev` in a process group of its own inside DAGSTER_HOME (so the dagster.yaml there is
# the instance's own), ends that group, then stops the engine. UI_CONFIG names another project's
# configuration; UI_ARGS go to `dagster dev` (UI_ARGS="-p 3001").
UI_CONFIG ?= $(CURDIR)/incremental_assets.yaml
ui: $(BASE_STAMP) maven java $(HOME_DIR)/dagster.yaml
	$(BIN)/incremental-assets --config $(UI_CONFIG) jars fetch
	DAGSTER_HOME=$(HOME_DIR) $(BIN)/python -m incremental_assets.ui --config $(UI_CONFIG) \
	  --workspace $(CURDIR)/workspace.yaml -- $(UI_ARGS)

test: install system
	$(BIN)/ruff check incremental_assets incremental_assets_tests
	$(BIN)/python -m pytest

# The model-based test for as long as asked (STEPS steps over many examples; DATABASE=mariadb for
# a MariaDB source, FORMAT=iceberg for an Iceberg lake). It prints its seed
# first; a failure prints the steps that reproduce it and the command that replays it.
soak: install java
	$(BIN)/python -m incremental_assets_tests.model.soak $(if $(SEED),--seed $(SEED)) $(if $(DATABASE),--database $(DATABASE)) $(if $(FORMAT),--format $(FORMAT)) $(if $(CAPTURE),--capture $(CAPTURE)) --steps $(or $(STEPS),500)

# What the tests need from the system: PostgreSQL's and MariaDB's binaries (the suite starts its own
# servers), Maven (which fetches the jars) and Debian's chromium for the UI test (Playwright can't
# download its own browser here). Installed with apt when running as root; otherwise the message
# says what to install.
java:
	@command -v java >/dev/null || { echo "Spark needs Java 17 (or 21) on PATH: apt-get install openjdk-17-jre-headless" >&2; exit 1; }

APT_INSTALL = apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq
maven:
	@command -v mvn >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then $(APT_INSTALL) maven; \
	  else echo "the jars are fetched with Maven (mvn): sudo apt-get install maven" >&2; exit 1; fi; }

system: java maven
	@[ -n "$$INCREMENTAL_ASSETS_TEST_PG" ] || command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then $(APT_INSTALL) postgresql; \
	  else echo "make test needs PostgreSQL's binaries: sudo apt-get install postgresql (or set INCREMENTAL_ASSETS_TEST_PG)" >&2; exit 1; fi; }
	@[ -n "$$INCREMENTAL_ASSETS_TEST_MYSQL" ] || [ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then $(APT_INSTALL) mariadb-server; \
	  else echo "make test needs MariaDB's binaries: sudo apt-get install mariadb-server (or set INCREMENTAL_ASSETS_TEST_MYSQL)" >&2; exit 1; fi; }
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then $(APT_INSTALL) chromium; \
	  else echo "make test needs Debian's chromium for the UI test: sudo apt-get install chromium" >&2; exit 1; fi; }

# 10M rows, 5 repetitions, every peer; writes BENCHMARKS.md (about an hour on 2 cores).
bench: install
	$(BIN)/python -m bench.run

lint: install
	$(BIN)/ruff check incremental_assets incremental_assets_tests
	$(BIN)/ruff format --check incremental_assets incremental_assets_tests
	$(BIN)/mypy incremental_assets incremental_assets_tests

clean:
	rm -rf .demo $(HOME_DIR) $(VENV) .pytest_cache .mypy_cache .ruff_cache
