# kforge: `make install` then `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# pytest-xdist workers for `make test`: CI has two cores.
JOBS   ?= 2

.PHONY: install test test-unit test-integration test-gpu bench bench-corpus bench-memory-bound bench-kernel-tuner-examples bench-reports serve clean

install: $(BIN)/kforge

$(BIN)/kforge: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

# The whole suite: unit, SQLite and PostgreSQL store contracts, the bus over Redis with real workers.
# GPU tests are skipped here without a device; run `make test-gpu` on a GPU machine. The tests of the services
# (servers, workers, PostgreSQL, Redis) run after the others, one at a time (tests/conftest.py); both parts always run.
test: install
	$(BIN)/pytest -q -n $(JOBS) -m "not services"; others=$$?; $(BIN)/pytest -q -m services && exit $$others

test-unit: install
	$(BIN)/pytest -q tests/unit

test-integration: install
	$(BIN)/pytest -q tests/integration

test-gpu: install
	$(BIN)/pytest -q -m gpu

# On a GPU machine: kforge and Kernel Tuner tune the same spaces side by side (bench/tune_vs_kernel_tuner.py),
# then the offline rules optimise vector_add against torch.add's bandwidth, with the explicit and the one_prompt
# strategy, each job's time printed against its target (bench/optimise_vector_add.py),
# then one vector_add candidate at 64M floats is verified, every trial (bench/verify_speed.py),
# then every kernel of examples/corpus goes through baseline, tune, explicit and one_prompt (bench/corpus_matrix.py),
# then every memory-bound one is optimised by the offline rules and held against a device-to-device copy of the
# same bytes (bench/memory_bound_table.py), at the corpus's sizes and at 8 times the small ones, beside what
# hand-written kernels of the same shapes reach (bench/ceilings.py).
# Rebuilding every report from 10,000 events needs no GPU: `make bench-reports` runs it alone.
bench: install bench-reports
	$(BIN)/python bench/tune_vs_kernel_tuner.py
	$(BIN)/python bench/optimise_vector_add.py --strategy explicit
	$(BIN)/python bench/optimise_vector_add.py --strategy one_prompt
	$(BIN)/python bench/verify_speed.py
	$(BIN)/python bench/corpus_matrix.py
	$(BIN)/python bench/memory_bound_table.py
	$(BIN)/python bench/memory_bound_table.py --larger
	$(BIN)/python bench/ceilings.py

bench-corpus: install
	$(BIN)/python bench/corpus_matrix.py

bench-memory-bound: install
	$(BIN)/python bench/memory_bound_table.py
	$(BIN)/python bench/memory_bound_table.py --larger
	$(BIN)/python bench/ceilings.py

# On a GPU machine: Kernel Tuner's own example scripts run by Kernel Tuner and by kforge, and the two bests timed
# in turn (KT_EXAMPLES: Kernel Tuner's examples/cuda folder, which this repository does not hold).
bench-kernel-tuner-examples: install
	$(BIN)/python bench/kernel_tuner_examples.py --examples $(KT_EXAMPLES)

bench-reports: install
	$(BIN)/python bench/rebuild_projections.py

serve: install
	$(BIN)/kforge serve

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
