"""Evaluation on τ² task sets: pass^k (passk.py), paired comparisons of two arms on the same tasks
(paired.py), the settings (config.py), the episode runner (runner.py) and what it writes (results.py).
Importing kit.eval imports neither tau2 nor a model until `evaluate` is used."""

from kit.eval.config import EvalConfig
from kit.eval.passk import pass_hat_k, pass_k_table

__all__ = ["EvalConfig", "EvalResult", "PairedDiff", "evaluate", "load_tasks_file", "outcomes_by_task",
           "paired_difference", "pass_hat_k", "pass_k_table"]


def __getattr__(name: str):
    if name in ("EvalResult", "load_tasks_file"):
        from kit.eval import results

        return getattr(results, name)
    if name in ("PairedDiff", "outcomes_by_task", "paired_difference"):
        from kit.eval import paired

        return getattr(paired, name)
    if name == "evaluate":
        from kit.eval.runner import evaluate

        return evaluate
    raise AttributeError(f"module 'kit.eval' has no attribute {name!r}")
