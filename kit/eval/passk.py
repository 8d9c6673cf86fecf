"""pass^k as τ²-bench defines it: mean over tasks of C(c, k) / C(n, k).

c = successes among n trials of a task. pass^1 is the mean success rate; pass^k asks
that k independent trials all succeed. A task with fewer than k trials has no pass^k.
The formula and the success test are tau2's own (tau2.metrics.agent_metrics `pass_hat_k`,
`is_successful`: reward within 1e-6 of 1), imported when first used so that importing
kit.eval stays free of tau2.
"""

from __future__ import annotations


def _tau2_metrics():
    import kit._tau2  # noqa: F401  (tau2 imported quietly and offline)
    from tau2.metrics import agent_metrics

    return agent_metrics


def is_success(reward: float) -> bool:
    """tau2's success test: the reward is 1 (within 1e-6)."""
    return _tau2_metrics().is_successful(reward)


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    """C(successes, k) / C(trials, k) by tau2's `pass_hat_k`, after checking the arguments
    (tau2 checks only k <= trials)."""
    if not 0 <= successes <= trials:
        raise ValueError(f"successes={successes} must lie in [0, trials={trials}]")
    if k < 1 or k > trials:
        raise ValueError(f"k={k} must lie in [1, trials={trials}]")
    return _tau2_metrics().pass_hat_k(trials, successes, k)


def pass_k_table(results: dict[str, list[float]], max_k: int = 4) -> dict[int, float]:
    """{k: pass^k} over tasks, from {task_id: [reward per trial]} (success = reward 1)."""
    if not results:
        raise ValueError("no results to score")
    n = min(len(r) for r in results.values())
    out = {}
    for k in range(1, min(max_k, n) + 1):
        vals = [pass_hat_k(sum(map(is_success, r)), len(r), k) for r in results.values()]
        out[k] = sum(vals) / len(vals)
    return out


def pass1_interval(results: dict[str, list[float]], ci: float = 0.95, n_boot: int = 2000,
                   seed: int = 0) -> tuple[float, float, float]:
    """pass^1 and its percentile bootstrap interval: (point, low, high). The kit's one interval
    (evaluation meta, stage outputs, report).

    pass^1 = mean over tasks of the task's success rate (success: `is_success`). Each resample draws
    tasks with replacement, then the trials of each drawn task with replacement, so both the task
    sample and trial noise widen the interval. Fixed seed: the same results give the same interval;
    one task with one outcome, or every task alike, gives a point."""
    import numpy as np

    groups = [np.asarray([is_success(x) for x in r], dtype=float) for r in results.values() if r]
    if not groups:
        raise ValueError("no results to score")
    point = float(np.mean([g.mean() for g in groups]))
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    k = len(groups)
    for b in range(n_boot):
        picks = rng.integers(0, k, size=k)
        stats[b] = np.mean([groups[i][rng.integers(0, len(groups[i]), size=len(groups[i]))].mean() for i in picks])
    lo, hi = np.quantile(stats, [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return point, float(lo), float(hi)


def pass1_by(results: dict[str, list[float]], labels: dict[str, str]) -> dict[str, dict]:
    """pass^1 over the tasks of each label: {label: {"pass^1", "tasks"}}, labels in the order first seen
    (`labels`: task id -> label; a task without trials or without a label is left out)."""
    groups: dict[str, list[list[float]]] = {}
    for task_id, rewards in results.items():
        if rewards and task_id in labels:
            groups.setdefault(labels[task_id], []).append(rewards)
    return {label: {"pass^1": sum(sum(map(is_success, r)) / len(r) for r in rs) / len(rs), "tasks": len(rs)}
            for label, rs in groups.items()}
