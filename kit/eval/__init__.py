"""Evaluation on τ² task sets: pass^k (passk.py), the settings (config.py) and the episode runner
(runner.py). Importing kit.eval imports neither tau2 nor a model until `evaluate` is used."""

from kit.eval.config import EvalConfig
from kit.eval.passk import pass_hat_k, pass_k_table

__all__ = ["EvalConfig", "EvalResult", "evaluate", "load_tasks_file", "pass_hat_k", "pass_k_table"]


def __getattr__(name: str):
    if name in ("EvalResult", "evaluate", "load_tasks_file"):
        from kit.eval import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'kit.eval' has no attribute {name!r}")
