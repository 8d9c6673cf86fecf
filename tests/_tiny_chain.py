"""The tiny whole chain every stage notebook runs in (papermill through `kit run`): built once per pytest
worker by the `tiny_chain` fixture (tests/conftest.py) and read by the notebook test and by the episode
browser's real-run test (both in xdist group `tiny_chain`, so one worker builds it). Its base model is a
small random-weight Llama with the embedded tokenizer (tests/_tiny_model.py): the notebooks and the run
folder are under test, not the model (SmolLM2-135M made the chain ~2.5 minutes of a 2-core machine)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TINY = """
name: tiny-notebooks
check_budgets: false   # plumbing only: these budgets cannot score
domain: mock
base_model: {base_model}
stages:
  - stage: synthesize
    params: {rounds: 1, num_plans: 1, tasks_per_plan: 1, group_size: 1, max_messages: 2, max_new_tokens: 16, user_max_new_tokens: 16,
             explore_steps: 0, llm_judge: false}
  - stage: sft_user
    params: {train_steps: 1, batch_size: 1, max_seq_len: 1024, gold_limit: 2}
  - stage: sft_agent
    params: {train_steps: 1, batch_size: 1, max_seq_len: 1024, gold_limit: 2}
  - stage: grpo
    params: {train_steps: 1, group_size: 2, tasks_per_step: 1, resample_budget: 0, micro_batch_size: 2, max_new_tokens: 8,
             max_messages: 2, user_max_new_tokens: 8, filter_mode: "off", probe_k: 2, eval_every: 1, eval_limit: 1}
  - stage: evaluate
    params: {trials: 1, limit: 2, max_messages: 2, max_new_tokens: 8, user_max_new_tokens: 8, label: tiny, allow_overlap: true}
  - stage: report
"""


@dataclass
class TinyChain:
    result: object  # kit.runner.execute.RunResult of the first run
    recipe: Path
    root: Path


def run_tiny_chain(root: Path) -> TinyChain:
    from kit.runner import load_recipe
    from kit.runner.execute import Runner

    from _tiny_model import tiny_model_folder

    recipe = root / "tiny.yaml"
    recipe.write_text(TINY.replace("{base_model}", str(tiny_model_folder(root / "tiny-model"))))
    with open(root / "run.log", "w") as log:
        res = Runner(load_recipe(recipe), None, root / "runs", root / "reports", stream=log).run()
    return TinyChain(res, recipe, root)
