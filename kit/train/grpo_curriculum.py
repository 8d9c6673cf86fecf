"""GRPO's pass-rate curriculum: train where the current policy sometimes succeeds.

    cur = Curriculum(tasks, cfg)                   # cfg.probe_k > 0 turns it on
    if cur.due(step):
        record = cur.probe(rollout, reward_fn, procs, step)   # probe_k episodes per task
        draws = TaskDraws(cur.band, ...)                       # steps draw from the band

A task the policy solves in every probe episode, or in none, gives a group whose rewards are all
equal: dynamic filtering drops it and the rollouts were wasted. Before the first step (and every
`probe_every` steps) the policy runs `probe_k` episodes of every task of the pool; tasks whose pass
rate lies in [band_min, band_max] form the band the steps draw from, the rest are set aside until the
next probe. Defaults follow a public Qwen3-8B GRPO run on τ² (NeMo RL): 16 rollouts per task, tasks
solved 13-16 times of 16 dropped before RL; here band_max 0.8 keeps 12/16 and drops 13/16, band_min
0.05 drops 0/16. Dynamic filtering stays as it is, inside the band.

An empty band (the policy solves everything or nothing) falls back to the whole pool, said in the
record (`band_empty`), so a step still runs and its skip reason tells what happened.

The probe's episodes are samples of the very policy the next step trains: with `keep` the probe holds
those of the band's tasks (scored, with their rewards) in `band_episodes`, and the trainer hands them
to the steps (cfg.probe_train; kit.train.grpo_groups.ProbeGroups) instead of rolling them out again.

Under `accelerate launch` each process probes every W-th task and the rates are summed over
processes, so every process agrees on the band.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kit.train.grpo_config import GRPOConfig

if TYPE_CHECKING:  # only annotated here: reading probes (the report, its tests) needs no torch
    from kit.train.processes import Processes


class Curriculum:
    def __init__(self, tasks: list, cfg: GRPOConfig):
        self.tasks = list(tasks)
        self.cfg = cfg
        self.band = list(tasks)          # before any probe: the whole pool
        self.rates: dict[str, float] = {}
        self.last_probe: int | None = None
        # task id -> (the scored probe episodes, their rewards): the last probe's, of this process's band tasks
        # (`probe(keep=True)`); the trainer takes them (not loop state: a checkpoint holds what is left of them
        # as kit.train.grpo_groups.ProbeGroups)
        self.band_episodes: dict[str, tuple[list, list[float]]] = {}

    @property
    def on(self) -> bool:
        return self.cfg.probe_k > 0

    def due(self, step: int) -> bool:
        """Probe before the first step and then every `probe_every` steps (0: only before the first)."""
        if not self.on:
            return False
        if self.last_probe is None:
            return True
        every = self.cfg.probe_every
        return every > 0 and step - self.last_probe >= every

    def probe(self, rollout: Callable[[list, int], list], reward_fn: Callable[[Any, Any], float],
              procs: Processes, step: int, keep: bool = False) -> dict:
        """Run probe_k episodes per task with the current policy, set the band; returns the probe's
        record (step, band size, each task's rate) for metrics.jsonl / probes.jsonl. `keep`: hold the
        scored episodes of this process's band tasks in `band_episodes` (else they are dropped)."""
        t0 = time.perf_counter()
        c, k, W, r = self.cfg, self.cfg.probe_k, procs.count, procs.index
        mine = list(range(r, len(self.tasks), W))
        wins = [0.0] * len(self.tasks)
        scored = [0.0] * len(self.tasks)  # episodes a server failed are not scored (Trajectory.infra_failed)
        # apart from the steps' rollout seeds; the first probe measures the start, the same for every GRPO seed
        # (kit/train/grpo_memo.py: the seeds of one start share it), later ones the run's own policy
        seed = ((start_seed(c.seed, step) * 7919 + 17) * 100_003 + step) * 101 + r
        chunk = max(1, c.probe_batch // k)  # tasks per rollout call: probe_batch episodes at once
        episodes: dict[int, tuple[list, list[float]]] = {}
        for start in range(0, len(mine), chunk):
            idx = mine[start: start + chunk]
            trajs = rollout([self.tasks[i] for i in idx for _ in range(k)], seed + start)
            for j, i in enumerate(idx):
                # (a trajectory a server failed says nothing of the policy; the rollout may return other records)
                ok = [t for t in trajs[j * k: (j + 1) * k] if not getattr(t, "infra_failed", False)]
                rewards = [float(reward_fn(self.tasks[i], t)) for t in ok]
                wins[i] = sum(x >= 1.0 for x in rewards)
                scored[i] = float(len(ok))
                if keep:
                    episodes[i] = (ok, rewards)
        if W > 1:
            wins, scored = [procs.sum(w) for w in wins], [procs.sum(n) for n in scored]
        self.rates = {t.id: wins[i] / max(scored[i], 1.0) for i, t in enumerate(self.tasks)}
        band = [t for t in self.tasks if c.band_min <= self.rates[t.id] <= c.band_max]
        self.band = band or list(self.tasks)
        self.last_probe = step
        kept = {id(t) for t in self.band}  # the tasks steps draw (the whole pool when the band is empty)
        self.band_episodes = {self.tasks[i].id: e for i, e in episodes.items() if id(self.tasks[i]) in kept}
        always = sum(v >= 1.0 for v in self.rates.values())
        never = sum(v <= 0.0 for v in self.rates.values())
        return {"step": step, "probe_k": k, "tasks": len(self.tasks), "band_size": len(band),
                "band_empty": not band, "always": always, "never": never,
                "band_min": c.band_min, "band_max": c.band_max,
                "mean_rate": sum(self.rates.values()) / max(len(self.rates), 1),
                "probe_s": round(time.perf_counter() - t0, 2), "infra_failed": int(k * len(self.tasks) - sum(scored)),
                "rates": dict(self.rates), "band": [t.id for t in band],
                "band_patterns": {p: sum(gold_pattern(t) == p for t in band) for p in sorted({gold_pattern(t) for t in band})}}

    def metrics(self, record: dict) -> dict:
        """The probe's numbers as step metrics (kit.metrics names)."""
        return {"curriculum/band_size": record["band_size"], "curriculum/always": record["always"],
                "curriculum/never": record["never"], "curriculum/band_empty": int(record["band_empty"]),
                "curriculum/mean_rate": record["mean_rate"], "time/probe_s": record["probe_s"]}

    # ----- resume --------------------------------------------------------------------------------

    def state_dict(self) -> dict:
        return {"rates": dict(self.rates), "band": [t.id for t in self.band], "last_probe": self.last_probe}

    def load_state_dict(self, state: dict) -> None:
        by_id = {t.id: t for t in self.tasks}
        self.rates = dict(state.get("rates") or {})
        self.band = [by_id[i] for i in state.get("band") or [] if i in by_id] or list(self.tasks)
        self.last_probe = state.get("last_probe")


def start_seed(seed: int, step: int) -> int:
    """The seed a measurement at `step` samples with: 0 before the first step (the probe and the curve
    point of the start are the start's, not the run's, so GRPO runs that differ only in `seed` share them),
    the run's `seed` after."""
    return seed if step > 0 else 0


def gold_pattern(task: Any) -> str:
    """A task's gold tool pattern: its gold actions' names in order ("get_users > create_task"), or
    "no_actions"."""
    if isinstance(task, dict):  # a task as its JSON
        names = [a["name"] for a in ((task.get("evaluation_criteria") or {}).get("actions") or [])]
        return " > ".join(names) or "no_actions"
    crit = getattr(task, "evaluation_criteria", None)
    names = [a.name for a in (getattr(crit, "actions", None) or [])]
    return " > ".join(names) or "no_actions"


def balanced_by_pattern(tasks: list) -> list:
    """`tasks` with every gold tool pattern's tasks cycled to the length of the most common pattern's
    (order kept within a pattern): a pass over the result draws each pattern equally often."""
    groups: dict[str, list] = {}
    for t in tasks:
        groups.setdefault(gold_pattern(t), []).append(t)
    most = max((len(g) for g in groups.values()), default=0)
    return [g[i % len(g)] for g in groups.values() for i in range(most)]
