# The two commands a user types: `make demo` and `make test`. Each creates .venv when it is
# missing and installs what it needs, so on a fresh machine it is the only command to type.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# A stamp per install set: re-installs when pyproject.toml changes.
CORE_STAMP := $(VENV)/.installed-core
DEV_STAMP  := $(VENV)/.installed-dev
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: demo test lint typecheck unit bench-l0 clean

demo: $(CORE_STAMP)
	$(BIN)/gliding-horse demo

test: lint typecheck unit

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

unit: $(DEV_STAMP)
	$(BIN)/pytest

bench-l0: $(CORE_STAMP)
	$(BIN)/gliding-horse bench l0 --entries 100000

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# torch is pinned first: 2.13.0 is a CPU build that lies on the reference machines' disk; left
# to itself, sentence-transformers would pull a multi-GB CUDA build of the newest torch.
$(CORE_STAMP): pyproject.toml | $(BIN)/python
	$(PIP) install torch==2.13.0
	$(PIP) install -e '.[local,langchain,llamaindex]'
	touch $@

$(DEV_STAMP): pyproject.toml $(CORE_STAMP)
	$(PIP) install -e '.[dev,local,bench,langchain,llamaindex,postgres]'
	touch $@

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis
