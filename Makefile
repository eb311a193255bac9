# Every target sets up .venv when missing and installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# Targets `make fuzz` runs at once (one worker process each): every core by default
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)

.PHONY: demo test fuzz bench peer-suite clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,torch,models]'
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,torch,models,bench]'
	touch $@

demo: $(VENV)/.installed-base
	$(BIN)/mil-passes demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -p no:cacheprovider tests

fuzz: $(VENV)/.installed-test
	HYPOTHESIS_PROFILE=deep $(BIN)/python -m mil_passes.testing.fuzz --examples 10000 --jobs $(FUZZ_JOBS)

bench: $(VENV)/.installed-bench
	$(BIN)/python benchmarks/run.py
	$(BIN)/python benchmarks/cli_startup.py

clean:
	rm -rf $(VENV) build *.egg-info

peer-suite: $(VENV)/.installed-test
	$(BIN)/python benchmarks/peer_suite.py
