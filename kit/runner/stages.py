"""How the runner sees the stages a recipe can name: their configs (kit/stages/<module>.py), and
the fields the runner sets itself. What each stage produces, which parameters take `@<stage id>`
references and how unset ones are wired is each stage's CONTRACT (kit/stages/contract.py),
collected by the registry (kit.stages.contracts()).

One notebook per stage module lives in notebooks/<module>.py (jupytext; sft_user and sft_agent share sft.py); its `parameters` cell lists the
same fields as the stage's Config (tests/test_notebooks.py checks that they agree). Every Config
forbids unknown fields, so a misspelt parameter is an error, never a silent default.

Fields the runner sets itself (RUNNER_FIELDS: where outputs go, the W&B group, ...) are not
settable from a recipe.

A parameter that names another stage's output is written `@<stage id>`:
    model: "@sft_agent"        # that stage's model folder (a stage that produces a model)
    data: "@synthesize"        # that stage's run folder (a stage that produces data)
Left unset (null), such a parameter is wired to the latest earlier stage its contract names (its
`Reference.wire_from`), else to its fallback; the resolved value is written to the run manifest.
"""

from __future__ import annotations

from kit.runner.stage import RUNNER_FIELDS
from kit.stages import StageConfig, config_class, stage_names

__all__ = ["RUNNER_FIELDS", "STAGES"]

# Each stage's Config (kit/stages/<module>.py): what a recipe's `params:` may set.
STAGES: dict[str, type[StageConfig]] = {name: config_class(name) for name in stage_names()}


def all_param_names() -> set[str]:
    return {name for model in STAGES.values() for name in model.model_fields}
