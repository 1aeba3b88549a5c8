# Two commands do everything on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: demo test bench lint typecheck clean install

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
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
