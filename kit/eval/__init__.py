"""Evaluation on τ² task sets: pass^k (passk.py) and the episode runner (runner.py)."""

from kit.eval.passk import pass_hat_k, pass_k_table
from kit.eval.runner import EvalConfig, EvalResult, evaluate, load_tasks_file

__all__ = ["EvalConfig", "EvalResult", "evaluate", "load_tasks_file", "pass_hat_k", "pass_k_table"]
