"""tau2's official evaluator, called the way tau2's runner calls it: the referee.

Returns the same shape as a kit Verdict summary, so the two can be compared line by line.
"""

from __future__ import annotations

from kit import _tau2  # noqa: F401

from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation  # noqa: E402

from kit.trajectory import Trajectory  # noqa: E402


def tau2_verdict(domain: str, task, trajectory: Trajectory) -> dict:
    sim = trajectory.to_tau2()
    try:
        info = evaluate_simulation(sim, task, EvaluationType.ALL, solo_mode=False, domain=domain)
    except Exception as e:
        return {"task_id": task.id, "reward": 0.0, "breakdown": None, "error": f"{type(e).__name__}: {e}"}
    breakdown = None
    if info.reward_breakdown is not None:
        breakdown = {getattr(k, "value", k): float(v) for k, v in info.reward_breakdown.items()}
    return {"task_id": task.id, "reward": float(info.reward), "breakdown": breakdown}


def same_verdict(kit: dict, ref: dict) -> bool:
    """Agreement: same reward, same breakdown, and both erred or neither did."""
    return (
        kit["reward"] == ref["reward"]
        and (kit.get("breakdown") or None) == (ref.get("breakdown") or None)
        and bool(kit.get("error")) == bool(ref.get("error"))
    )
