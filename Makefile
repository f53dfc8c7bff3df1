# pimphony: every target runs inside .venv/, created and filled on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: setup sim test test-all bench lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install everything from PyPI

sim: $(STAMP)  ## default demo: QK^T, SV and FC GEMV under static, ping-pong and DCS
	$(BIN)/pimphony demo

test: $(STAMP)  ## the test suite CI runs (slow cases excluded)
	$(BIN)/python -m pytest -q -m "not slow"

test-all: $(STAMP)  ## every test, including the slow ones
	$(BIN)/python -m pytest -q

bench: $(STAMP)  ## TLM speed of each scheduler (commands per second)
	$(BIN)/python -m sim.bench

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf build .pytest_cache
