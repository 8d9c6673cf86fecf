"""pass^k as τ²-bench defines it: mean over tasks of C(c, k) / C(n, k).

c = successes among n trials of a task. pass^1 is the mean success rate; pass^k asks
that k independent trials all succeed. A task with fewer than k trials has no pass^k.
"""

from __future__ import annotations

from math import comb


def pass_hat_k(successes: int, trials: int, k: int) -> float:
    if not 0 <= successes <= trials:
        raise ValueError(f"successes={successes} must lie in [0, trials={trials}]")
    if k < 1 or k > trials:
        raise ValueError(f"k={k} must lie in [1, trials={trials}]")
    return comb(successes, k) / comb(trials, k)


def pass_k_table(results: dict[str, list[float]], max_k: int = 4) -> dict[int, float]:
    """{k: pass^k} over tasks, from {task_id: [reward per trial]} (success = reward 1)."""
    if not results:
        raise ValueError("no results to score")
    n = min(len(r) for r in results.values())
    out = {}
    for k in range(1, min(max_k, n) + 1):
        vals = [pass_hat_k(sum(1 for x in r if x == 1.0), len(r), k) for r in results.values()]
        out[k] = sum(vals) / len(vals)
    return out


def pass1_ci(results: dict[str, list[float]], ci: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval for pass^1, resampling tasks (with replacement).

    pass^1 = mean over tasks of the task's success rate (success = reward 1). Fixed seed: the
    same results always give the same interval. One task or every task alike gives a point."""
    import random

    rates = [sum(1 for x in r if x == 1.0) / len(r) for r in results.values() if r]
    if not rates:
        raise ValueError("no results to score")
    rng = random.Random(seed)
    n = len(rates)
    stats = sorted(sum(rates[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    a = (1 - ci) / 2

    def q(p: float) -> float:  # linear interpolation, as numpy.quantile's default
        pos = p * (len(stats) - 1)
        i = int(pos)
        j = min(i + 1, len(stats) - 1)
        return stats[i] + (stats[j] - stats[i]) * (pos - i)

    return (q(a), q(1 - a))
