# Two commands do everything on a fresh machine: `make demo` and `make test`.
# The interpreter that makes the venv: PYTHON if given, else the newest python3.N >= 3.11 on
# PATH (or python3 when it is new enough); scripts/find-python.sh says which is missing if none.
PYTHON ?=
SHELL  := /bin/bash
# pytest-xdist workers for `make test`: each has its own Redis server and port range
# (tests/conftest.py); a test file runs whole on one worker, so its module fixtures (a shared
# Sentinel group or Cluster) start once. Most of the suite waits on servers, so 4 on 2 cores.
TEST_WORKERS ?= 4
# The suite's processes keep their bytecode, and pytest its rewritten test modules, under the
# venv, even where PYTHONDONTWRITEBYTECODE is set (it is on this machine): without it each
# worker rewrote every test module at collection (20 s of CPU each, on a CPU-bound run) and
# every replica and CLI process the suite starts compiled fleetgate from source again.
TEST_ENV = env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
TSTAMP := $(VENV)/.installed-test

.PHONY: demo test test-durations bench chaos chaos-ci lint typecheck clean install which-python

FIND_PYTHON = py="$(PYTHON)"; [ -n "$$py" ] || py="$$($(SHELL) scripts/find-python.sh)" || exit 1

$(PY):
	@$(FIND_PYTHON); echo "creating $(VENV) with $$py"; "$$py" -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[demo]'
	touch $@

$(TSTAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP) $@

install: $(STAMP)

# Which interpreter a new venv would be made with (tests/test_makefile.py).
which-python:
	@$(FIND_PYTHON); echo "$$py"

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
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir $(VENV)/site
	$(TEST_ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile
	$(TEST_ENV) $(PY) -m tests.compatkit -n $(TEST_WORKERS)

# Measures every test file again: tests/durations.json, the order in which `make test` hands
# the files out to its workers, longest first (tests/schedule.py).
test-durations: $(TSTAMP)
	$(TEST_ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --store-durations

bench: $(STAMP)
	$(PY) -m bench

# Ten minutes of faults against a real fleet, then the history checker (bench/chaos).
chaos: $(STAMP)
	$(PY) -m bench.chaos --duration 600

# The 60 s run of `make test` (tests/test_chaos_ci.py runs it beside the suite's other tests
# and prints its first and last lines at the end): its seed comes from the commit (git
# rev-parse HEAD, or the time outside a git checkout) and is printed, so a failure can be
# replayed with --seed N; the seed also chooses the topology (single, sentinel or cluster:
# each in turn, commit by commit).
chaos-ci: $(STAMP)
	$(PY) -m bench.chaos --seed commit --topology seed --duration 60

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
