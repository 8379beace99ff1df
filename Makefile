# bert-tfx: the two README commands are `make demo` and `make test`.
# Setup is stamp-file based: a second run reinstalls nothing unless requirements.txt
# or pyproject.toml changed.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: help setup test check lint format demo lock lock-gpu data clean bazel-test reference-env experiments

help:
	@echo "make demo   - set up, then run the main job end to end"
	@echo "make test   - set up, then ruff + the full pytest suite"
	@echo "make check  - ruff + the test files marked fast (pytest -m fast): the edit loop"
	@echo "make setup  - create .venv with the locked dependencies (idempotent)"
	@echo "make data   - fetch the package-shipped corpora and weights into the cache"
	@echo "make lock   - recompile requirements.txt from requirements.in with uv"
	@echo "make lock-gpu - recompile requirements-gpu.txt (Dockerfile.gpu's lock) from requirements-gpu.in"
	@echo "make bazel-test - the tests as Bazel targets (installs Debian's Bazel 4.2.3 if missing)"
	@echo "make reference-env - create .venv-ref (Python 3.11, HF transformers on CPU torch) for"
	@echo "                experiments/minilm_reference.py (the tests' MiniLM reference values),"
	@echo "                experiments/hf_parity.py and bench.run --suite=finetune"
	@echo "make experiments STAGES='hf' - docs/results.md's runs (experiments/run_all.sh; resumable)"

$(STAMP): requirements.txt pyproject.toml scripts/find_python.sh
	@set -euo pipefail; \
	if [ ! -x $(PY) ]; then \
	  PY310=$$(bash scripts/find_python.sh 3.10); \
	  echo "setup: creating $(VENV) with $$PY310"; \
	  "$$PY310" -m venv $(VENV); \
	fi; \
	$(PY) -m pip install -q --disable-pip-version-check uv==0.13.9; \
	echo "setup: uv pip sync requirements.txt"; \
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/uv pip sync -q requirements.txt; \
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/uv pip install -q --no-deps --no-build-isolation -e .; \
	touch $(STAMP)

setup: $(STAMP)

# The reference environment: HF transformers on PyTorch's CPU build, beside .venv and never
# imported by the project; experiments/minilm_reference.py runs in it (README, "Data and
# weights"). torch goes first, on its own: from a wheel in pip's find-links (this machine's
# 2.13.0+cpu) when one is there, else from PyTorch's CPU index, since PyPI's torch is a CUDA build
# of several GB. The rest is requirements-reference.txt, every pin, checked with `pip check`.
REF_VENV := .venv-ref
REF_STAMP := $(REF_VENV)/.installed
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
$(REF_STAMP): requirements-reference.txt scripts/find_python.sh
	@set -euo pipefail; \
	if [ ! -x $(REF_VENV)/bin/python ]; then \
	  PY311=$$(bash scripts/find_python.sh 3.11); \
	  echo "reference-env: creating $(REF_VENV) with $$PY311"; \
	  "$$PY311" -m venv $(REF_VENV); \
	fi; \
	pip=($(REF_VENV)/bin/python -m pip -q --disable-pip-version-check); \
	torch=$$(grep -E '^torch==' requirements-reference.txt); \
	if ! "$${pip[@]}" install --no-index --no-deps "$$torch" 2>/dev/null; then \
	  echo "reference-env: $$torch from $(TORCH_CPU_INDEX)"; \
	  "$${pip[@]}" install --no-deps --index-url $(TORCH_CPU_INDEX) "$$torch"; \
	fi; \
	echo "reference-env: pip install -r requirements-reference.txt"; \
	"$${pip[@]}" install --no-deps -r requirements-reference.txt; \
	"$${pip[@]}" check; \
	touch $(REF_STAMP)

reference-env: $(REF_STAMP)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# pytest-xdist workers for `make test` (whole files per worker; each worker holds TF/TFX, 1-3 GB).
TEST_WORKERS ?= 2
# PYTEST_ARGS: more pytest options, e.g. CI's --durations=40 (the slowest tests, listed).
PYTEST_ARGS ?=
# --no-loadscope-reorder: the files in tests/conftest.py's order (the longest first), not
# xdist's default of the files with the most tests first.
test: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The quick files carry the `fast` marker (the modelling core among them); tests/BUILD's fast
# list, CI's Bazel pass, names the same files (tests/test_fast_selection.py).
check: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m fast

data: setup
	$(PY) -m bert_tf.data.fetch --all

demo: setup
	$(PY) -m demo.run

# docs/results.md's experiments, stage by stage (experiments/run_all.sh: every stage when STAGES is
# empty); a rerun resumes. Stage hf compares with HF transformers, so it needs the reference env.
STAGES ?=
experiments: setup $(if $(or $(filter hf,$(STAGES)),$(if $(STAGES),,all)),$(REF_STAMP))
	bash experiments/run_all.sh $(STAGES)

# Bazel route: Debian's bazel-bootstrap (prints "bazel no_version", so the version check asks dpkg),
# fully offline (see WORKSPACE, .bazelrc). BAZEL_TARGETS / BAZEL_FLAGS narrow a run, e.g.
# make bazel-test BAZEL_TARGETS=//tests:data/test_fetch BAZEL_FLAGS=--local_test_jobs=1
BAZEL_VERSION := 4.2.3
BAZEL_TARGETS ?= //...
BAZEL_FLAGS ?=
bazel-test: setup
	@set -euo pipefail; \
	bazel_ok() { command -v bazel >/dev/null && \
	  [[ "$$(dpkg-query -W -f='$${Version}' bazel-bootstrap 2>/dev/null)" == $(BAZEL_VERSION)+* ]]; }; \
	if ! bazel_ok; then \
	  echo "bazel-test: installing Debian's bazel-bootstrap $(BAZEL_VERSION)"; \
	  apt-get update -q; \
	  apt-get install -y -q bazel-bootstrap; \
	  bazel_ok || { echo "error: apt gave no bazel-bootstrap $(BAZEL_VERSION)" >&2; exit 1; }; \
	fi; \
	rc=0; bazel test $(BAZEL_FLAGS) $(BAZEL_TARGETS) || rc=$$?; \
	bazel shutdown; \
	exit $$rc

lock: setup
	$(VENV)/bin/uv pip compile -q --python-version 3.10 requirements.in -o requirements.txt

# The GPU image's lock: requirements.in + tensorflow[and-cuda], constrained to requirements.txt's
# pins (-c in requirements-gpu.in), so run it after `make lock`. Not installed by `make setup`.
lock-gpu: setup
	$(VENV)/bin/uv pip compile -q --python-version 3.10 requirements-gpu.in -o requirements-gpu.txt

clean:
	rm -rf $(VENV) $(REF_VENV) .pytest_cache .ruff_cache build *.egg-info
