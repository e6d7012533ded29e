# Two set-up commands on a fresh machine: `make serve` and `make test`.
# `make serve` installs the runtime only (`pip install -e .`); `make test`, `make test-fast`,
# `make lint` and `make install-test` (benchmarks and eval) add the test extras (torch, ray,
# faster-whisper, flask, openai, pytest, ruff, mypy). Each has its own stamp, named after a hash of
# pyproject.toml, so `make test` after `make serve` installs only what is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PYPROJECT_HASH := $(shell cat pyproject.toml | sha1sum | cut -c1-12)
RUNTIME_STAMP := $(VENV)/.installed-runtime-$(PYPROJECT_HASH)
TEST_STAMP := $(VENV)/.installed-test-$(PYPROJECT_HASH)
CONFIG ?= configs/piper.yaml
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test test-fast lint docs install install-test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The runtime: what `voxflow serve` and `voxflow speak` need, nothing else.
$(RUNTIME_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	rm -f $(VENV)/.installed-runtime-*
	touch $@

# The test extras on top (they include `eval`: Whisper, Resemblyzer, piper-tts's HTTP server).
$(TEST_STAMP): $(RUNTIME_STAMP)
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps 'resemblyzer==0.1.4'
	rm -f $(VENV)/.installed-test-*
	touch $@

install: $(RUNTIME_STAMP)

install-test: $(TEST_STAMP)

serve: $(RUNTIME_STAMP)
	$(BIN)/voxflow serve --config $(CONFIG) --host $(HOST) --port $(PORT)

test: $(TEST_STAMP)
	$(BIN)/ruff check voxflow tests
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q

# Unit tests only (no real server, voice or Whisper): seconds, not minutes.
test-fast: $(TEST_STAMP)
	$(BIN)/ruff check voxflow tests
	$(BIN)/python -m pytest -q tests/unit

# ruff, and mypy over voxflow/ (settings in pyproject.toml, [tool.mypy]).
lint: $(TEST_STAMP)
	$(BIN)/ruff check voxflow tests
	$(BIN)/python -m mypy

# Regenerate docs/configuration.md from the settings models (a unit test fails while it is stale).
docs: $(RUNTIME_STAMP)
	$(BIN)/python -m voxflow.settings_doc --write

clean:
	rm -rf $(VENV) build *.egg-info
