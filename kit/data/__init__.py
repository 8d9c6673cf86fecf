"""Held-out evaluation tasks shipped with the kit: `Domain.tasks("heldout")` reads them.

    from kit.data import heldout_tasks
    tasks = heldout_tasks("mock")        # 60 τ² Tasks, ids heldout-000 ...

They are never trained on, and are made independently of the data engine (kit/engine), so an
evaluation on them measures what the engine's tasks taught rather than what they repeated:
kit/data/mock_heldout.json is written by scripts/make_mock_heldout.py (seeded, its own word
lists) and checked by tests/test_heldout.py.
"""

from __future__ import annotations

import json
from pathlib import Path

HELDOUT_SPLIT = "heldout"
HELDOUT_FILES = {"mock": Path(__file__).with_name("mock_heldout.json")}


def heldout_tasks(domain: str) -> list:
    """The held-out τ² Tasks of `domain` (KeyError when the kit ships none for it)."""
    from kit import _tau2  # noqa: F401  (offline tau2)
    from tau2.data_model.tasks import Task

    if domain not in HELDOUT_FILES:
        from kit.errors import UnknownName

        raise UnknownName(f"no held-out tasks for domain '{domain}'; available: {', '.join(HELDOUT_FILES)}")
    return [Task.model_validate(t) for t in json.loads(HELDOUT_FILES[domain].read_text(encoding="utf-8"))]
