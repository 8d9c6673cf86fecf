"""How the runner wires stages together: which stages a recipe can name (their configs live in
kit/stages/<stage>.py), what each produces, which parameters take `@<stage id>` references.

One notebook per stage module lives in notebooks/<module>.py (jupytext; sft_user and sft_agent share sft.py); its `parameters` cell lists the
same fields as the stage's Config (tests/test_notebooks.py checks that they agree). Every Config
forbids unknown fields, so a misspelt parameter is an error, never a silent default.

Fields the runner sets itself (RUNNER_FIELDS: where outputs go, the W&B group, ...) are not
settable from a recipe.

A parameter that names another stage's output is written `@<stage id>`:
    model: "@sft_agent"        # that stage's model folder (sft_user, sft_agent, grpo)
    data: "@synthesize"        # that stage's run folder (synthesize)
Left unset (null), such a parameter is wired to the latest earlier stage that produces it (see
`AUTO_WIRING`); the resolved value is written to the run manifest.
"""

from __future__ import annotations

from typing import Optional

from kit.runner.stage import RUNNER_FIELDS
from kit.stages import MODULES, StageConfig, config_class

__all__ = ["AUTO_WIRING", "PRODUCES", "REFERENCE_FIELDS", "RUNNER_FIELDS", "STAGES"]

# Each stage's Config (kit/stages/<stage>.py): what a recipe's `params:` may set.
STAGES: dict[str, type[StageConfig]] = {name: config_class(name) for name in MODULES}

# What a stage produces, for `@id` references: a model folder, a data folder, or neither.
PRODUCES: dict[str, Optional[str]] = {
    "synthesize": "data", "sft_user": "model", "sft_agent": "model", "grpo": "model",
    "evaluate": "eval", "report": None,
}

# Which parameters take references, and to what kind of output.
REFERENCE_FIELDS: dict[str, dict[str, str]] = {
    "synthesize": {"model": "model", "agent_model": "model", "user_model": "model"},
    "sft_user": {"data": "data", "model": "model"},
    "sft_agent": {"data": "data", "model": "model"},
    "grpo": {"model": "model", "user_model": "model", "tasks": "data"},
    "evaluate": {"model": "model", "user_model": "model"},
    "report": {},
}

# Unset reference fields: the latest earlier stage of these kinds, else the fallback.
AUTO_WIRING: dict[str, dict[str, tuple[tuple[str, ...], Optional[str]]]] = {
    "synthesize": {"model": ((), "base_model")},
    "sft_user": {"data": (("synthesize",), "gold"), "model": ((), "base_model")},
    "sft_agent": {"data": (("synthesize",), "gold"), "model": ((), "base_model")},
    "grpo": {"model": (("sft_agent",), "base_model"), "user_model": (("sft_user",), "base_model"),
             "tasks": (("synthesize",), None)},
    "evaluate": {"model": (("grpo", "sft_agent"), "base_model"), "user_model": ((), "base_model")},
    "report": {},
}


def all_param_names() -> set[str]:
    return {name for model in STAGES.values() for name in model.model_fields}
