# bert-tfx: the two README commands are `make demo` and `make test`.
# Setup is stamp-file based: a second run reinstalls nothing unless requirements.txt
# or pyproject.toml changed.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: help setup test lint format demo lock data clean

help:
	@echo "make demo   - set up, then run the main job end to end"
	@echo "make test   - set up, then ruff + the full pytest suite"
	@echo "make setup  - create .venv with the locked dependencies (idempotent)"
	@echo "make data   - fetch the package-shipped corpora and weights into the cache"
	@echo "make lock   - recompile requirements.txt from requirements.in with uv"

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

test: setup lint
	$(PY) -m pytest

data: setup
	$(PY) -m bert_tf.data.fetch --all

demo: setup
	$(PY) -m bert_tf.demo

lock: setup
	$(VENV)/bin/uv pip compile -q --python-version 3.10 requirements.in -o requirements.txt

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
