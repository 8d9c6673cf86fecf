"""The stages a recipe names, one module each: what it does (docstring), its `Config` (what a
recipe, the stage notebook and the `kit` command set), its `Outputs` (what stage.json records and
the report reads), `run(config, stage) -> Outputs` (all of its logic) and its `CONTRACT`
(kit/stages/contract.py: what it produces, its references and their wiring, whether it may run
under `launch:`, its recipe checks, memory estimate, leak sources and report part).

    from kit.stages import grpo
    out = grpo.run(grpo.Config(domain="mock", train_steps=2), stage)   # stage: kit.runner.stage.Stage

This is the registry: the runner, recipe validation, the memory estimate, the leak check and the
report loop over `contracts()`; no other module names a stage. Adding a stage is adding its module
here (`STAGE_MODULES`) and its notebook (notebooks/<module>.py).

The notebooks in notebooks/ are thin drivers of these functions. This package imports no stage
module by itself (they are loaded by name when asked for): a stage's code fingerprint
(kit/runner/codehash.py) covers the modules its notebook imports, not every stage's.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from types import ModuleType

from kit.stages.base import StageConfig, StageOutputs
from kit.stages.contract import Contract, Produces

# the stage modules under kit/stages, in the order their stages usually run; each exports CONTRACT
STAGE_MODULES: tuple[str, ...] = ("synthesize", "sft", "grpo", "evaluate", "report")


@lru_cache(maxsize=1)
def _registry() -> dict[str, tuple[str, Contract]]:
    out: dict[str, tuple[str, Contract]] = {}
    for mod in STAGE_MODULES:
        contract = importlib.import_module(f"kit.stages.{mod}").CONTRACT
        for name in contract.names:
            if name in out:
                raise RuntimeError(f"stage '{name}' is declared by kit/stages/{out[name][0]}.py and kit/stages/{mod}.py")
            out[name] = (mod, contract)
    return out


def stage_names() -> list[str]:
    """Every stage a recipe can name, in registry order."""
    return list(_registry())


def contracts() -> list[Contract]:
    """Every stage module's contract, in registry order (one per module: sft_user and sft_agent share one)."""
    return list(dict.fromkeys(c for _, c in _registry().values()))


def _known(stage: str) -> tuple[str, Contract]:
    reg = _registry()
    if stage not in reg:
        from kit.errors import UnknownName

        raise UnknownName(f"unknown stage {stage!r}", f"a stage is one of: {', '.join(reg)}")
    return reg[stage]


def contract(stage: str) -> Contract:
    """The contract of the module that declares `stage` (kit.errors.UnknownName for an unknown stage)."""
    return _known(stage)[1]


def module(stage: str) -> ModuleType:
    return importlib.import_module(f"kit.stages.{_known(stage)[0]}")


def config_class(stage: str) -> type[StageConfig]:
    return module(stage).Config


def outputs_class(stage: str) -> type[StageOutputs]:
    return module(stage).Outputs


def summarizes_run(stage: object) -> bool:
    """Whether `stage` (a name, maybe unknown or None: a manifest's entry) reads the whole run (the report)."""
    return isinstance(stage, str) and stage in _registry() and contract(stage).summarizes_run


def __getattr__(name: str):
    if name == "MODULES":  # stage name -> its module under kit/stages
        return {stage: mod for stage, (mod, _) in _registry().items()}
    raise AttributeError(f"module 'kit.stages' has no attribute {name!r}")


__all__ = ["MODULES", "STAGE_MODULES", "Contract", "Produces", "StageConfig", "StageOutputs", "config_class",
           "contract", "contracts", "module", "outputs_class", "stage_names", "summarizes_run"]
