"""Paired comparison of two evaluation arms scored on the same tasks: pass^1 of B minus pass^1 of A.

    a, b = outcomes_by_task(eval_a["episodes"]), outcomes_by_task(eval_b["episodes"])   # {task id: [0/1 per trial]}
    res = paired_difference(a, b, "SFT", "RL")
    print(res.summary_line())   # RL − SFT: +0.200 [+0.050, +0.350] (pass^1 0.300 → 0.500), p=0.0312 ...
    df = pd.DataFrame([res.to_row()])

Why paired: both arms face the same tasks, so the task-to-task spread in difficulty (the largest source
of variance at 9 to 60 tasks) cancels in the per-task difference d_i = pass^1_B(i) − pass^1_A(i), where
pass^1_X(i) is arm X's mean success over its trials of task i. Only tasks present in both arms count
(matched by task id); the others are counted as unmatched and left out. What is computed:

  - diff: mean_i d_i (= pass^1_B − pass^1_A on the matched tasks).
  - ci95: percentile paired bootstrap: resample task indices with replacement (the same draw for both
    arms, which is what keeps the pairing), the mean of d over each resample; fixed seed. Trials are
    not resampled: each d_i already carries its own trial noise, and the task draw is the unit here
    (kit.eval.passk.pass1_interval, the one-arm interval, resamples trials too).
  - p_value: paired permutation (sign-flip) test of "the arms are exchangeable on every task": under it
    each d_i is as likely as −d_i; statistic |sum d_i|. Tasks with d_i = 0 carry no sign. Exact over all
    2^m sign vectors when m (the nonzero d_i) <= EXACT_MAX_TASKS, else Monte Carlo with MC_DRAWS draws
    and a fixed seed, p = (1 + hits) / (1 + draws) (never 0: a finite sample cannot show that).
  - mcnemar_p: with one 0/1 trial per task in both arms, McNemar's exact test on the discordant tasks:
    B-only wins b and A-only wins c, p = min(1, 2 · P(Binomial(b + c, 1/2) <= min(b, c))). (On such data
    it equals the exact sign-flip p; reported because it is the test readers know.)
  - mde: the smallest true difference this many tasks would detect with two-sided alpha = 0.05 and power
    0.8, by the normal approximation MDE = (z_{0.975} + z_{0.8}) · sd(d) / sqrt(n) ≈ 2.80 · sd(d) / sqrt(n),
    sd with ddof 1. With fewer than MIN_TASKS_FOR_SD tasks, or an observed sd of 0 (identical arms, or
    greedy copies), the observed sd says nothing, and a planning value is used instead: sd(d) = sqrt(0.5),
    what half the tasks discordant gives (equivalently two independent 0/1 arms at p = 0.5). `mde_basis`
    says which.
  - wins_b / wins_a / ties: tasks with d_i > 0, < 0, = 0.

numpy and the standard library only: no torch or tau2 here (outcomes_by_task asks tau2's success test,
kit.eval.passk.is_success, when called).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import Enum
from statistics import NormalDist
from typing import Optional

import numpy as np
from pydantic import BaseModel, Field, computed_field

EXACT_MAX_TASKS = 20   # up to 2^20 sign vectors enumerated (well under a second)
MC_DRAWS = 20000       # Monte Carlo sign vectors past that: the p-value's own sd is about 0.0015 at p = 0.05
MIN_TASKS_FOR_SD = 5   # fewer tasks: the MDE uses the planning sd, not the observed one
PLANNING_SD = math.sqrt(0.5)
ALPHA, POWER = 0.05, 0.8


class PairedTest(str, Enum):
    """How the p-value was computed."""

    SIGN_FLIP_EXACT = "sign-flip, exact"
    SIGN_FLIP_MC = "sign-flip, Monte Carlo"


class MdeBasis(str, Enum):
    """Which sd(d) the minimum detectable difference used."""

    OBSERVED = "observed sd"
    PLANNING = "planning sd"  # PLANNING_SD: too few tasks, or an observed sd of 0


class PairedDiff(BaseModel):
    """B − A on the tasks both arms were scored on (module docstring: what each number is)."""

    a_label: str
    b_label: str
    n_tasks: int = Field(description="Tasks in both arms (the only ones counted).")
    pass1_a: float = Field(description="A's pass^1 on the matched tasks.")
    pass1_b: float
    diff: float = Field(description="pass1_b − pass1_a: the mean per-task difference.")
    ci95: tuple[float, float] = Field(description="Percentile paired bootstrap interval over tasks.")
    ci: float = 0.95
    p_value: float = Field(description="Paired sign-flip permutation test, two-sided.")
    test: PairedTest
    mcnemar_p: Optional[float] = Field(default=None, description="McNemar's exact p (one 0/1 trial per task "
                                       "in both arms only).")
    mde: float = Field(description="Minimum detectable difference, alpha 0.05 two-sided, power 0.8.")
    mde_sd: float = Field(description="The sd(d) the MDE used.")
    mde_basis: MdeBasis
    wins_b: int
    wins_a: int
    ties: int
    unmatched_a: int = Field(description="Tasks only A was scored on (left out).")
    unmatched_b: int = Field(description="Tasks only B was scored on (left out).")

    @computed_field
    @property
    def unmatched(self) -> int:
        return self.unmatched_a + self.unmatched_b

    def to_row(self) -> dict:
        """One table row: what the report and `kit compare` show."""
        return {"A": self.a_label, "B": self.b_label, "tasks": self.n_tasks, "pass^1 A": self.pass1_a,
                "pass^1 B": self.pass1_b, "Δ (B−A)": self.diff,
                f"{int(self.ci * 100)}% CI": f"[{self.ci95[0]:+.3f}, {self.ci95[1]:+.3f}]",
                "p": self.p_value, "test": self.test.value, "McNemar p": self.mcnemar_p,
                "MDE": self.mde, "MDE from": f"{self.mde_basis.value} {self.mde_sd:.3f}",
                "B wins / A wins / ties": f"{self.wins_b} / {self.wins_a} / {self.ties}",
                "unmatched": self.unmatched}

    def summary_line(self) -> str:
        """One line for a notebook or a log."""
        mc = f"; McNemar exact {self.mcnemar_p:.4g}" if self.mcnemar_p is not None else ""
        drop = f"; {self.unmatched} unmatched tasks left out" if self.unmatched else ""
        return (f"{self.b_label} − {self.a_label}: {self.diff:+.3f} [{self.ci95[0]:+.3f}, {self.ci95[1]:+.3f}] "
                f"(pass^1 {self.pass1_a:.3f} → {self.pass1_b:.3f}), p={self.p_value:.4g} ({self.test.value}{mc}), "
                f"MDE {self.mde:.3f} ({self.mde_basis.value} {self.mde_sd:.3f}), n={self.n_tasks} tasks: "
                f"{self.b_label} wins {self.wins_b}, {self.a_label} wins {self.wins_a}, ties {self.ties}{drop}")


# ----- the pieces ----------------------------------------------------------------------------------


def sign_flip_p(d: np.ndarray, exact_max: int = EXACT_MAX_TASKS, draws: int = MC_DRAWS,
                seed: int = 0) -> tuple[float, PairedTest]:
    """Two-sided p of the paired sign-flip test on per-task differences `d` (statistic |sum d|)."""
    x = np.abs(np.asarray(d, dtype=float))
    x = x[x > 0]
    m = len(x)
    observed = abs(float(np.asarray(d, dtype=float).sum()))
    tol = 1e-9 * max(1.0, float(x.sum()))
    if m <= exact_max:
        hits, chunk = 0, 1 << 15
        bits = np.arange(m)
        for start in range(0, 1 << m, chunk):
            codes = np.arange(start, min(start + chunk, 1 << m))
            signs = ((codes[:, None] >> bits) & 1) * 2 - 1
            hits += int((np.abs(signs @ x) >= observed - tol).sum())
        return hits / (1 << m), PairedTest.SIGN_FLIP_EXACT
    rng = np.random.default_rng(seed)
    hits, chunk = 0, 2000
    for start in range(0, draws, chunk):
        signs = rng.integers(0, 2, size=(min(chunk, draws - start), m)) * 2 - 1
        hits += int((np.abs(signs @ x) >= observed - tol).sum())
    return (1 + hits) / (1 + draws), PairedTest.SIGN_FLIP_MC


def mcnemar_exact_p(b: int, c: int) -> float:
    """McNemar's exact p from the discordant counts: b tasks only B solved, c only A solved."""
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def min_detectable_difference(d: np.ndarray, alpha: float = ALPHA,
                              power: float = POWER) -> tuple[float, float, MdeBasis]:
    """(MDE, the sd(d) used, its basis): (z_{1−alpha/2} + z_power) · sd(d) / sqrt(n)."""
    d = np.asarray(d, dtype=float)
    n = len(d)
    if n == 0:
        raise ValueError("no tasks: no detectable difference")
    sd = float(np.std(d, ddof=1)) if n > 1 else 0.0
    basis = MdeBasis.OBSERVED
    if n < MIN_TASKS_FOR_SD or sd == 0.0:
        sd, basis = PLANNING_SD, MdeBasis.PLANNING
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return z * sd / math.sqrt(n), sd, basis


def tasks_needed(diff: float, sd: float, alpha: float = ALPHA, power: float = POWER) -> Optional[int]:
    """How many paired tasks a true difference `diff` needs to be detected (two-sided `alpha`, `power`) at a
    per-task sd(d) of `sd` (the MDE formula solved for n); None for a difference of 0."""
    if diff == 0:
        return None
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return math.ceil((z * sd / abs(diff)) ** 2)


def paired_bootstrap_ci(d: np.ndarray, ci: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of mean(d) over `n_boot` resamples of the tasks (indices drawn with replacement)."""
    d = np.asarray(d, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(d), size=(n_boot, len(d)))
    lo, hi = np.quantile(d[idx].mean(axis=1), [(1 - ci) / 2, 1 - (1 - ci) / 2])
    return float(lo), float(hi)


# ----- the comparison ------------------------------------------------------------------------------


def paired_difference(per_task_a: dict[str, list[float]], per_task_b: dict[str, list[float]],
                      a_label: str = "A", b_label: str = "B", ci: float = 0.95, n_boot: int = 2000,
                      seed: int = 0) -> PairedDiff:
    """B − A from {task id: [outcome per trial]} of each arm (outcome: 1 success, 0 failure; a task's
    pass^1 is their mean). Tasks with no trials count as absent. ValueError when no task is in both."""
    a = {str(t): [float(x) for x in r] for t, r in per_task_a.items() if len(r)}
    b = {str(t): [float(x) for x in r] for t, r in per_task_b.items() if len(r)}
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError(f"{a_label} and {b_label} share no task: nothing to pair "
                         f"({len(a)} and {len(b)} tasks)")
    pa = np.array([np.mean(a[t]) for t in common])
    pb = np.array([np.mean(b[t]) for t in common])
    d = pb - pa
    p, test = sign_flip_p(d, seed=seed)
    single = all(len(a[t]) == 1 and len(b[t]) == 1 and a[t][0] in (0.0, 1.0) and b[t][0] in (0.0, 1.0)
                 for t in common)
    wins_b, wins_a = int((d > 0).sum()), int((d < 0).sum())
    mde, sd, basis = min_detectable_difference(d)
    return PairedDiff(a_label=a_label, b_label=b_label, n_tasks=len(common), pass1_a=float(pa.mean()),
                      pass1_b=float(pb.mean()), diff=float(d.mean()), ci95=paired_bootstrap_ci(d, ci, n_boot, seed),
                      ci=ci, p_value=p, test=test, mcnemar_p=mcnemar_exact_p(wins_b, wins_a) if single else None,
                      mde=mde, mde_sd=sd, mde_basis=basis, wins_b=wins_b, wins_a=wins_a,
                      ties=len(common) - wins_b - wins_a, unmatched_a=len(set(a) - set(b)),
                      unmatched_b=len(set(b) - set(a)))


def outcomes_by_task(episodes) -> dict[str, list[float]]:
    """{task id: [1.0 or 0.0 per trial, in trial order]} from an evaluation's episodes (eval.json's
    `episodes` rows, or the DataFrame of them: task_id, trial, reward). Success is tau2's test, as for
    pass^k (kit.eval.passk.is_success: reward 1 within 1e-6)."""
    import pandas as pd

    from kit.eval.passk import is_success

    rows: Iterable[dict] = episodes.to_dict(orient="records") if isinstance(episodes, pd.DataFrame) else episodes
    out: dict[str, list[tuple[int, float]]] = {}
    for r in rows:
        reward = r.get("reward")
        if reward is None or (isinstance(reward, float) and math.isnan(reward)):
            continue  # an episode with no verdict is no outcome
        out.setdefault(str(r["task_id"]), []).append((int(r.get("trial") or 0), float(is_success(float(reward)))))
    return {t: [x for _, x in sorted(v)] for t, v in out.items()}
