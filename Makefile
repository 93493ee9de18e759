# fleetgate: the two entry points are `make demo` (the lab demo) and `make test` (everything
# CI runs). Both install what they need first: Debian packages, then the pinned virtualenv.
SHELL := /bin/bash
PY ?= /usr/bin/python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint unit integration deps venv bench collection clean

deps:
	@scripts/install-system-deps.sh

$(STAMP): requirements.lock pyproject.toml
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.lock
	$(BIN)/python -m pip install -q --no-deps -e .
# An editable install compiles none of fleetgate's own modules, and where PYTHONDONTWRITEBYTECODE
# is set (as on these machines) every fleetgate process, the CLI and each batch worker, compiles
# them again: about 60 ms each. Not content/: those are the checkout's Ansible files.
	$(BIN)/python -m compileall -q -x /content/ python/fleetgate
	@touch $@

venv: deps $(STAMP)

demo: venv
	scripts/demo.sh

lint: venv
	$(BIN)/ruff check python tests benchmarks molecule plugins roles playbooks
	$(BIN)/mypy
	VENV_BIN=$(BIN) scripts/lint-roles.sh

unit: venv
	$(BIN)/pytest -q tests/unit

integration: venv
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -q tests/integration

# Two workers, a test file each at a time (module-scoped labs stay whole), slowest first
# (tests/conftest.py): the 2-core CI machine runs a TCG VM in one lane and container labs or
# unit tests in the other.
test: venv lint
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder tests

bench: venv
	$(BIN)/python benchmarks/lab_up.py

collection: venv
	$(BIN)/python scripts/build-collection.py --out dist

clean:
	rm -rf $(VENV) .fleetgate
