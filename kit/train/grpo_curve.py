"""GRPO's learning curve: pass^1 of the current policy on a held-out validation slice.

    curve = LearningCurve(tasks, cfg, domain)          # cfg.eval_every > 0 turns it on
    if curve.due(step):
        point = curve.evaluate(agent_backend, user_backend, step)   # {"step", "pass1", "ci95", ...}
        if point["best"]: save the policy as the best checkpoint

Every `eval_every` optimizer steps (and before the first, and after the last) the policy plays
`eval_trials` episodes of every task of the validation slice (`eval_split`: neither trained on nor
the final test set) against the training user simulator, scored by the kit verifier; pass^1 with its
95% bootstrap interval over tasks. The best point (highest pass^1; the earliest on ties) and the last
are both kept by the stage (model_best/, model/).

The curve's sampling is its own (`eval_temperature`; 0 = greedy, one trial: a low-variance curve);
the final comparison of arms is the `evaluate` stage's, on the test slice.
"""

from __future__ import annotations

import time
from typing import Any

from kit.train.grpo_config import GRPOConfig
from kit.train.grpo_curriculum import start_seed


class LearningCurve:
    def __init__(self, tasks: list, cfg: GRPOConfig, domain: Any):
        self.tasks = list(tasks)
        self.cfg = cfg
        self.domain = domain
        self.points: list[dict] = []
        self.best: dict | None = None

    @property
    def on(self) -> bool:
        return self.cfg.eval_every > 0 and bool(self.tasks)

    def due(self, step: int, last: bool = False) -> bool:
        """Before the first step, every `eval_every` steps, and after the last (`last`)."""
        if not self.on or any(p["step"] == step for p in self.points):
            return False
        return step % self.cfg.eval_every == 0 or last

    def evaluate(self, agent: Any, user: Any, step: int) -> dict:
        """One point of the curve; `best` is True when it beats every earlier point."""
        from kit.llm.types import SamplingParams
        from kit.rollout.loop import RolloutConfig, run_episodes
        from kit.verify import verify

        c = self.cfg
        t0 = time.perf_counter()
        rc = RolloutConfig(
            max_messages=c.max_messages, max_errors=c.max_errors, seed=start_seed(c.seed, step) * 31 + 7 + step,
            templates_dir=c.templates_dir,
            agent_params=SamplingParams(temperature=c.eval_temperature, max_new_tokens=c.max_new_tokens),
            user_params=SamplingParams(temperature=c.eval_temperature, max_new_tokens=c.user_max_new_tokens))
        todo = [t for t in self.tasks for _ in range(c.eval_trials)]
        by_task: dict[str, list[float]] = {t.id: [] for t in self.tasks}
        infra = 0
        for start in range(0, len(todo), c.probe_batch):
            chunk = todo[start: start + c.probe_batch]
            for task, traj in zip(chunk, run_episodes(self.domain, chunk, agent, user, rc, progress=False)):
                if traj.infra_failed:  # a server's failure, not the policy's: counted, not scored
                    infra += 1
                    continue
                by_task[task.id].append(verify(self.domain, task, traj).reward)
        point = self.add_point(step, by_task, time.perf_counter() - t0)
        point["infra_failed"] = infra
        return point

    def add_point(self, step: int, by_task: dict[str, list[float]], eval_s: float) -> dict:
        """The point (curve.jsonl's record) of the rewards `by_task` scored after `step` steps."""
        from kit.eval.passk import pass1_interval

        c = self.cfg
        p1, lo, hi = pass1_interval(by_task)
        point = {"step": step, "pass1": p1, "ci95": [lo, hi], "tasks": len(by_task), "trials": c.eval_trials,
                 "temperature": c.eval_temperature, "split": c.eval_split, "eval_s": round(eval_s, 1),
                 "per_task": {k: sum(v) / len(v) for k, v in by_task.items() if v}}
        point["best"] = self.best is None or p1 > self.best["pass1"]
        if point["best"]:
            self.best = {k: point[k] for k in ("step", "pass1", "ci95")}
        self.points.append(point)
        return point

    def metrics(self, point: dict) -> dict:
        return {"val/pass1": point["pass1"], "val/ci_low": point["ci95"][0], "val/ci_high": point["ci95"][1],
                "time/eval_s": point["eval_s"]}

    # ----- resume --------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {"points": list(self.points), "best": self.best}

    def load_state_dict(self, state: dict) -> None:
        self.points = list(state.get("points") or [])
        self.best = state.get("best")


def flat_curve_warning(points: list[dict]) -> str | None:
    """A warning when the learning curve never rose above its start: no point after step 0 beat step 0's pass^1,
    so model_best/ is the start policy. None when it rose, or with fewer than two points.

    Why it is worth a banner: on the kit's laptop runs (docs/ablations.md, "GRPO seeds and SFT starts": every
    GRPO run of the 135M agent on mock there, 2026-12-05/06) every run whose 20-task validation curve stayed flat
    ended below its SFT start on the test slice or at most 0.005 above it, and every run whose curve rose ended at
    or above it: the curve's last point is a one-minute early warning of a run that learned nothing."""
    if len(points) < 2:
        return None
    first, later = points[0], points[1:]
    if any(p["pass1"] > first["pass1"] for p in later):
        return None
    last = points[-1]
    return (f"VALIDATION DID NOT RISE: pass^1 {first['pass1']:.3f} at step {first['step']}, "
            f"{last['pass1']:.3f} after step {last['step']} on the validation slice: model_best/ is the start policy. "
            "On the kit's laptop runs every GRPO run whose curve stayed flat ended no better than its start on the "
            "test slice (docs/ablations.md); evaluate model_best/ for the best agent, model/ for what RL did")
