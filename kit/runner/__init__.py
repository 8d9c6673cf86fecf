"""Notebook-driven runs: recipes (YAML) → stage notebooks (papermill) → runs/<run-id>/ → reports/<run-id>/.

    kit run recipes/quickstart-cpu.yaml          # validate the whole recipe, then run it (resumable)

Read in this order: stages.py (how stages are wired; each stage's Config and logic live in
kit/stages/), recipe.py (a recipe's schema,
validation, expansion of ablation arms), execute.py (papermill, skip/resume, failures),
launch.py (a training stage under accelerate launch), manifest.py (what a run records), stage.py (what a notebook calls), report.py (the HTML report),
paper.py (the paper's numbers).
"""

from kit.runner.recipe import Recipe, RecipeError, load_recipe, parse_override

__all__ = ["Recipe", "RecipeError", "load_recipe", "parse_override", "run_recipe", "StageFailed"]


def __getattr__(name):  # execute.py imports papermill: only when a run starts
    if name in ("run_recipe", "StageFailed", "Runner", "RunResult"):
        from kit.runner import execute

        return getattr(execute, name)
    raise AttributeError(name)
