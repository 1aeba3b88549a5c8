# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: demo test bench chaos chaos-ci lint typecheck clean install

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[demo]'
	touch $@

$(TSTAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP) $@

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fleetgate demo

lint: $(TSTAMP)
	$(VENV)/bin/ruff check replica coordinator tests bench
	$(VENV)/bin/mypy

typecheck: lint

test: $(TSTAMP)
	bash scripts/ensure-tools.sh
	$(VENV)/bin/ruff check replica coordinator tests bench
	$(VENV)/bin/mypy
	$(MAKE) chaos-ci
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench

# Ten minutes of faults against a real fleet, then the history checker (bench/chaos).
chaos: $(STAMP)
	$(PY) -m bench.chaos --duration 600

# The 60 s run of `make test`: its seed comes from the commit (git rev-parse HEAD, or the time
# outside a git checkout) and is printed, so a failure can be replayed with --seed N.
chaos-ci: $(STAMP)
	$(PY) -m bench.chaos --seed commit --duration 60

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
