# Two set-up commands on a fresh machine: `make serve` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
CONFIG ?= configs/piper.yaml
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test lint install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps 'resemblyzer==0.1.4'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/voxflow serve --config $(CONFIG) --host $(HOST) --port $(PORT)

test: $(STAMP)
	$(BIN)/ruff check voxflow tests
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check voxflow tests

clean:
	rm -rf $(VENV) build *.egg-info
