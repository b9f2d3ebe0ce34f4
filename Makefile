# One entry point for people and CI. Every target creates the environment it needs.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test bench lint venv debs generate clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,dev,plots,dask,spark,tables]'
	touch $(STAMP)

venv: $(STAMP)

## Debian packages the integration tests use (prometheus, promtool, alertmanager, amtool, chromium).
debs:
	bash .ci/install-debian-packages.sh

## The demo: a synthetic world whose states change within a minute; Ctrl-C stops it.
run: $(STAMP)
	$(PY) -m monitor demo

## Lint, type-check and the whole test suite (slow and integration tests included).
test: $(STAMP) debs lint
	$(PY) -m pytest -q
	@test -f .pytest-finished || { echo "pytest ended before its session finished (an os._exit?): the suite did not run whole" >&2; exit 1; }

lint: $(STAMP)
	$(VENV)/bin/ruff check monitor tests bench grafana deploy
	$(VENV)/bin/ruff format --check monitor tests bench grafana deploy
	$(VENV)/bin/mypy

## Dashboards, Prometheus rules, PrometheusRule and Grafana alerting from deploy/mixin/config.toml.
generate: $(STAMP)
	$(PY) -m deploy.generate

## Benchmarks: prints time and memory ratios measured side by side in one run.
bench: $(STAMP)
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
