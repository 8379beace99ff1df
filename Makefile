# bert-tfx: the two README commands are `make demo` and `make test`.
# Setup is stamp-file based: a second run reinstalls nothing unless requirements.txt
# or pyproject.toml changed.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: help setup test check lint format demo lock lock-gpu data clean bazel-test

help:
	@echo "make demo   - set up, then run the main job end to end"
	@echo "make test   - set up, then ruff + the full pytest suite"
	@echo "make check  - ruff + the quick test files (tests/BUILD's fast list): the edit loop"
	@echo "make setup  - create .venv with the locked dependencies (idempotent)"
	@echo "make data   - fetch the package-shipped corpora and weights into the cache"
	@echo "make lock   - recompile requirements.txt from requirements.in with uv"
	@echo "make lock-gpu - recompile requirements-gpu.txt (Dockerfile.gpu's lock) from requirements-gpu.in"
	@echo "make bazel-test - the tests as Bazel targets (installs Debian's Bazel 4.2.3 if missing)"

$(STAMP): requirements.txt pyproject.toml scripts/find_python310.sh
	@set -euo pipefail; \
	if [ ! -x $(PY) ]; then \
	  PY310=$$(bash scripts/find_python310.sh); \
	  echo "setup: creating $(VENV) with $$PY310"; \
	  "$$PY310" -m venv $(VENV); \
	fi; \
	$(PY) -m pip install -q --disable-pip-version-check uv==0.13.9; \
	echo "setup: uv pip sync requirements.txt"; \
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/uv pip sync -q requirements.txt; \
	VIRTUAL_ENV=$(CURDIR)/$(VENV) $(VENV)/bin/uv pip install -q --no-deps --no-build-isolation -e .; \
	touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# pytest-xdist workers for `make test` (whole files per worker; each worker holds TF/TFX, 1-3 GB).
TEST_WORKERS ?= 2
test: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# The quick files are listed once, in tests/BUILD (`fast = [...]`, also CI's Bazel pass).
FAST_TESTS = $(shell sed -n '/^    fast = \[/,/^    \],/p' tests/BUILD | grep -o '"[^"]*\.py"' | tr -d '"' | sed 's|^|tests/|')

check: setup lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(FAST_TESTS)

data: setup
	$(PY) -m bert_tf.data.fetch --all

demo: setup
	$(PY) -m demo.run

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
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
