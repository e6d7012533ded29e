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

.PHONY: serve test test-fast lint docs install install-test clean gpu-wheels gpu-rehearsal \
	conformance

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

# Debian's nginx, for the reverse-proxy tests (unpacked here when none is installed; no root).
NGINX := .tools/nginx/usr/sbin/nginx
$(NGINX):
	tests/tools/get-nginx.sh .tools/nginx

# `make test`'s unit tests run on two workers (as `make test-fast` runs them), the modules
# marked slow (real networks, processes and servers) one at a time, and the integration tests
# on two workers a module at a time (the Ray modules all on one: tests/conftest.py): most of
# their time is spent waiting on servers they start. 2-core Intel Xeon: 561-626 s against 760 s
# one at a time.
test: $(TEST_STAMP) $(NGINX)
	$(BIN)/ruff check voxflow tests
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest -q -n 2 -m "not slow" tests/unit
	$(BIN)/python -m pytest -q -m slow tests/unit
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests/integration

# The edit loop: ruff and the unit tests on every core, less the modules marked slow (real
# networks and processes, tests/conftest.py), which `make test` runs with the rest.
test-fast: $(TEST_STAMP)
	$(BIN)/ruff check voxflow tests
	$(BIN)/python -m pytest -q -n auto -m "not slow" tests/unit

# ruff, and mypy over voxflow/ (settings in pyproject.toml, [tool.mypy]).
lint: $(TEST_STAMP)
	$(BIN)/ruff check voxflow tests
	$(BIN)/python -m mypy

# Regenerate docs/configuration.md from the settings models (a unit test fails while it is stale).
docs: $(RUNTIME_STAMP)
	$(BIN)/python -m voxflow.settings_doc --write

# The GPU checks (benchmarks/gpu/README.md). `gpu-wheels` fetches the wheels the bare GPU
# machine lacks (CPython 3.12) into .gpu-wheels/cp312, the folder to carry there.
# `gpu-rehearsal` plays that machine here: a fresh venv holding only its packages
# (benchmarks/gpu/device-packages.txt, the CPU torch standing in), the wheel folder made for
# this Python, the network cut (unshare -n, loopback up), then `run.sh --dry-run`: every step
# on the CPU at tiny sizes, servers and requests included. A missing import fails it. It ends
# by printing the size of the tree that travels, wheels included (at most 64 MiB).
GPU_VENV := .venv-gpu-rehearsal
GPU_PY_VERSION = $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')

gpu-wheels:
	benchmarks/gpu/wheels.sh --python 3.12

gpu-rehearsal: gpu-wheels
	rm -rf $(GPU_VENV)
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_VENV)/bin/pip install -q --disable-pip-version-check -r benchmarks/gpu/device-packages.txt
	PIP="$(GPU_VENV)/bin/python -m pip" benchmarks/gpu/wheels.sh --python $(GPU_PY_VERSION)
	unshare -n sh -c 'ip link set lo up && PY=$(GPU_VENV)/bin/python benchmarks/gpu/run.sh --dry-run --out-dir gpu-out/rehearsal'
	benchmarks/gpu/travel_size.sh .gpu-wheels/cp312

# The conformance suite (tests/conformance/README.md): real client libraries (Pipecat, LiveKit's
# OpenAI plugin, the openai SDK 2.x and 3.x) and replays of apps' requests against one real
# `voxflow serve --config configs/multi.yaml`. Each client venv .venv-conformance/NAME is built
# from tests/conformance/requirements-NAME.txt, afresh whenever that file changes (its stamp is
# named after the file's hash); the server runs from .venv (the runtime install is enough).
# Home Assistant's own Wyoming integration (venv `homeassistant`) needs Python 3.13, as Home
# Assistant does: `python3.13` on the PATH, else pyenv's; without one that check is left out
# and `make conformance` says so.
PYTHON313 ?= $(shell for p in python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13; do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null \
	&& { command -v $$p; break; }; done)
CONFORMANCE_VENVS := latest openai2 $(if $(PYTHON313),homeassistant)
conformance_python = $(if $(filter homeassistant,$(1)),$(PYTHON313),$(PYTHON))
conformance_stamp = .venv-conformance/$(1)/.installed-$(shell sha1sum tests/conformance/requirements-$(1).txt | cut -c1-12)
CONFORMANCE_STAMPS := $(foreach v,$(CONFORMANCE_VENVS),$(call conformance_stamp,$(v)))

define conformance_venv_rule
$(call conformance_stamp,$(1)): tests/conformance/requirements-$(1).txt
	rm -rf .venv-conformance/$(1)
	$(call conformance_python,$(1)) -m venv .venv-conformance/$(1)
	.venv-conformance/$(1)/bin/pip install -q --disable-pip-version-check -r tests/conformance/requirements-$(1).txt
	touch $$@
endef
$(foreach v,$(CONFORMANCE_VENVS),$(eval $(call conformance_venv_rule,$(v))))

conformance: $(RUNTIME_STAMP) $(CONFORMANCE_STAMPS)
	$(if $(PYTHON313),,@echo "conformance: no Python 3.13 here: Home Assistant's Wyoming check is left out")
	$(BIN)/python tests/conformance/run.py $(foreach v,$(CONFORMANCE_VENVS),--venv $(v))

clean:
	rm -rf $(VENV) $(GPU_VENV) .venv-conformance build *.egg-info
