"""Orchestration of a run: recipes (YAML) → stage notebooks (papermill) → runs/<run-id>/. Presentation
(the report, the episode browser, reading a run folder back) is kit.report; nothing here imports it.

    kit run recipes/quickstart-cpu.yaml          # validate the whole recipe, then run it (resumable)

Read in this order: stages.py (the stages' Configs; each stage's logic and its CONTRACT, what it
produces and how it is wired, live in kit/stages/), recipe.py (a recipe's schema, validation, expansion of ablation arms), execute.py
(one stage top to bottom: share, skip/resume, execute through a notebook or launch executor, failures), launch.py (a training stage under accelerate launch), memory.py
(the GPU memory estimate of `kit run --validate`), manifest.py (what a run records), codehash.py (the
code part of a stage's fingerprint), stage.py (what a notebook calls).
"""

from kit.runner.recipe import Recipe, RecipeError, load_recipe, parse_override

__all__ = ["Recipe", "RecipeError", "load_recipe", "parse_override", "run_recipe", "StageFailed"]


def __getattr__(name):  # execute.py imports papermill: only when a run starts
    if name in ("run_recipe", "StageFailed", "Runner", "RunResult"):
        from kit.runner import execute

        return getattr(execute, name)
    raise AttributeError(name)
