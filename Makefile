# Every target sets up .venv when missing and installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# Targets `make fuzz` runs at once (one worker process each): every core by default
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)

.PHONY: demo test check fuzz fuzz-coremltools fuzz-packages bench peer-suite op-tests matrix clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

# torchvision's classifiers for tests/test_real_models.py, apart from site-packages (pyproject.toml,
# the models extra, says why); an earlier install's copy in site-packages is removed.
TORCHVISION := torchvision==0.28.0
VISION_DIR := $(VENV)/torchvision-models

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,torch,models,optests]'
	$(BIN)/pip uninstall -q -y torchvision 2>/dev/null || true
	$(BIN)/pip install -q --no-deps --upgrade --target $(VISION_DIR) $(TORCHVISION)
	touch $@

$(VENV)/.installed-optests: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,torch,optests]'
	touch $@

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,torch,models,bench]'
	$(BIN)/pip uninstall -q -y torchvision 2>/dev/null || true
	$(BIN)/pip install -q --no-deps --upgrade --target $(VISION_DIR) $(TORCHVISION)
	touch $@

demo: $(VENV)/.installed-base
	$(BIN)/mil-passes demo

# The suite, after lint, format and type checks (make check): CI fails on any of them. TEST_JOBS worker
# processes (pytest-xdist) share the suite a test file at a time, so a module's fixtures are built once;
# then the tests marked `serial` (they time real runs: tests/test_interrupts.py) run alone.
TEST_JOBS ?= 2
test: check
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_JOBS) --dist loadfile -m "not serial" tests
	$(BIN)/python -m pytest -q -p no:cacheprovider -p no:xdist -m serial tests

# Lint, format and types, as configured in pyproject.toml ([tool.ruff], [tool.mypy]).
check: $(VENV)/.installed-test
	$(BIN)/ruff check mil_passes tests benchmarks
	$(BIN)/ruff format --check mil_passes tests benchmarks
	$(BIN)/mypy

# The generator's validity (3,000 drawn programs over every fuzz target and opset, none failing
# coremltools' type inference while built) and the broken-pass shrink test on every plant (make test
# plants only the pattern it breaks); every pass of the package, its pipeline and lint's
# contract on 10,000 programs each; then every pass,
# the package's pipeline and mil_passes.pipeline() on FUZZ_STATES_EXAMPLES stateful programs each
# (outputs and states bit for bit over 4 steps).
FUZZ_STATES_EXAMPLES ?= 2000
fuzz: $(VENV)/.installed-test
	HYPOTHESIS_PROFILE=deep $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_generator_validity.py \
		tests/test_fuzz.py::test_a_broken_pass_is_caught_and_shrunk_to_a_small_program
	HYPOTHESIS_PROFILE=deep $(BIN)/python -m mil_passes.testing.fuzz --examples 10000 --jobs $(FUZZ_JOBS)
	HYPOTHESIS_PROFILE=deep $(BIN)/python -m mil_passes.testing.fuzz --states --pipeline mil_passes \
		--examples $(FUZZ_STATES_EXAMPLES) --jobs $(FUZZ_JOBS)

# Every distinct pass of coremltools' DEFAULT pipeline, and DEFAULT as a whole, checked as
# `mil-passes verify` checks them, on programs with DEFAULT's patterns planted in; failures are
# classed (miscompile, crash, precision) and minimized into scripts under reproducers/. Exits 1 on a
# miscompile or a crash. `pipeline:mil_passes` is mil_passes.pipeline() as one target. The two passes
# that need states, DEFAULT and pipeline() also run on stateful programs (`states:` targets, compared
# bit for bit over 4 steps). 40 programs per target (67 targets) took 15 minutes on 2 cores
# with other work running.
FUZZ_CT_EXAMPLES ?= 40
fuzz-coremltools: $(VENV)/.installed-test
	$(BIN)/python -m mil_passes.testing.fuzz --each-pass-of default --pipeline default --pipeline mil_passes \
		--pass states:common::canonicalize_inplace_pattern --pass states:common::prefer_state_in_downstream \
		--pipeline states:default --pipeline states:mil_passes \
		--examples $(FUZZ_CT_EXAMPLES) --jobs $(FUZZ_JOBS) --minimize --reproducers reproducers

# The command on FUZZ_PACKAGES hostile packages (four families of mutations of a small package: bytes,
# Manifest.json, structure, meaning): lint and optimize or verify on each, every promise of
# docs/cli-guarantees.md checked. make test runs 200.
FUZZ_PACKAGES ?= 2000
fuzz-packages: $(VENV)/.installed-test
	$(BIN)/python -m mil_passes.testing.fuzz.packages --variants $(FUZZ_PACKAGES)

bench: $(VENV)/.installed-bench
	$(BIN)/python -m benchmarks.run
	$(BIN)/python benchmarks/cli_startup.py
	$(BIN)/python -m benchmarks.oracle

clean:
	rm -rf $(VENV) .matrix build *.egg-info

peer-suite: $(VENV)/.installed-test
	$(BIN)/python benchmarks/peer_suite.py

op-tests: $(VENV)/.installed-optests
	$(BIN)/python benchmarks/op_tests.py

# The supported versions (docs/supported-versions.md): one virtualenv per cell under .matrix/, one cell at
# a time. MATRIX_SUITE=core (default) or full; MATRIX_CELLS="ct8.3-py3.11 ..." for some cells only.
MATRIX_SUITE ?= core
MATRIX_CELLS ?=
matrix:
	$(PYTHON) benchmarks/matrix.py --suite $(MATRIX_SUITE) $(foreach cell,$(MATRIX_CELLS),--cell $(cell))
