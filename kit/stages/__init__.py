"""The stages a recipe names, one module each: what it does (docstring), its `Config` (what a
recipe, the stage notebook and the `kit` command set), its `Outputs` (what stage.json records and
the report reads) and `run(config, stage) -> Outputs` (all of its logic).

    from kit.stages import grpo
    out = grpo.run(grpo.Config(domain="mock", train_steps=2), stage)   # stage: kit.runner.stage.Stage

The notebooks in notebooks/ are thin drivers of these functions. This package imports no stage
module by itself: a stage's code fingerprint (kit/runner/codehash.py) covers the modules its
notebook imports, not every stage's.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from kit.stages.base import StageConfig, StageOutputs

# stage name (what a recipe's `stage:` says) -> its module under kit/stages
MODULES: dict[str, str] = {
    "synthesize": "synthesize", "sft_user": "sft", "sft_agent": "sft", "grpo": "grpo", "evaluate": "evaluate",
    "report": "report",
}


def module(stage: str) -> ModuleType:
    if stage not in MODULES:
        from kit.errors import UnknownName

        raise UnknownName(f"unknown stage {stage!r}", f"a stage is one of: {', '.join(MODULES)}")
    return importlib.import_module(f"kit.stages.{MODULES[stage]}")


def config_class(stage: str) -> type[StageConfig]:
    return module(stage).Config


def outputs_class(stage: str) -> type[StageOutputs]:
    return module(stage).Outputs


__all__ = ["MODULES", "StageConfig", "StageOutputs", "config_class", "module", "outputs_class"]
