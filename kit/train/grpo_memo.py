"""What GRPO measures before its first step, kept for the next GRPO stage that starts from the same place.

    memo = StartMemo(policy_stage_dir / "memo", start_identity(cfg, policy=..., user=..., tasks=...), origin=out_dir)
    GRPOTrainer(..., start_memo=memo)      # step 0: the probe and the curve point are read, or run and written

Before step 0 the curriculum probes every RL task (probe_k episodes each) and the learning curve scores the
validation slice: a quarter to a half of a short CPU run's episodes (an ablation arm of 64 training episodes
spends ~100 on its probe and 20 on its first curve point). Both are functions of the start alone: the policy's
weights, the user simulator, the tasks and checkers, and the sampling and episode settings. Arms of an
ablation that differ only in how they update (batch shape, filtering, learning rate, budget) or in their GRPO
`seed` (step 0 samples with seed 0 in every run: kit.train.grpo_curriculum.start_seed) start from the same
place, so the second arm reads the first arm's step-0 records instead of rolling them out again. Its probes.jsonl
and curve.jsonl say so (`reused_from`, the stage that measured them; `probe_s` / `eval_s` 0: nothing was spent).

The identity (`start_identity`) is every GRPOConfig field except those that only act from step 1 on
(`AFTER_START`): a field added later is part of the identity until someone lists it there, so a new knob can
cost a rerun, never a wrong reuse. The memo lives beside the policy it describes (the start stage's folder): when
that stage reruns, its folder moves aside and the memo with it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from kit.files import json_digest, task_digest

# fields that act only after step 0's probe and curve point (how steps draw, update and stop, and where they write)
AFTER_START = frozenset({
    "train_steps", "episode_budget", "group_size", "tasks_per_step", "lr", "clip_eps", "kl_coef", "filter_mode",
    "adv_scope", "resample_budget", "user_faults", "minibatches", "micro_batch_size", "micro_batch_tokens", "max_seq_tokens",
    "pack_turns", "loss_norm", "max_grad_norm", "weight_decay", "probe_every", "eval_every", "band_balance",
    "probe_train", "probe_train_steps",
    "save_every", "keep_checkpoints", "print_metrics", "sync_dir", "user_tag", "weight_sync",
    "seed"})  # step 0 samples with seed 0 whatever the run's (grpo_curriculum.start_seed): seeds share a start


def start_identity(cfg: Any, *, policy: str, user: str, tasks: Any, eval_tasks: Any = None) -> dict:
    """What step 0's probe and curve point depend on: the policy and user (as their stage fingerprints say),
    the tasks with their checkers and the validation tasks (digests), and the config less `AFTER_START`."""
    fields = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in AFTER_START}
    return {"policy": policy, "user": user, "tasks": task_digest(tasks), "eval_tasks": task_digest(eval_tasks), "config": fields}


class StartMemo:
    """Step-0 records by kind ("probe", "curve") under one identity, in `folder`."""

    def __init__(self, folder: str | Path, identity: dict, origin: str):
        self.folder, self.identity, self.origin = Path(folder), identity, str(origin)
        self.key = json_digest(identity)[:20]

    def _path(self, kind: str) -> Path:
        return self.folder / f"grpo-start-{kind}-{self.key}.json"

    def load(self, kind: str) -> Optional[dict]:
        """The record another stage saved, with `reused_from` (its stage folder); None when there is none, it
        is this stage's own (a resumed stage measures again), or it does not parse."""
        try:
            doc = json.loads(self._path(kind).read_text())
        except (OSError, ValueError):
            return None
        if doc.get("identity") != self.identity or doc.get("origin") == self.origin:
            return None
        return {**doc["record"], "reused_from": doc["origin"]}

    def save(self, kind: str, record: dict) -> None:
        """Written once, by the first stage that measured it (atomically: a reader never sees half a file)."""
        path = self._path(kind)
        if path.exists():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps({"identity": self.identity, "origin": self.origin, "record": record}) + "\n")
        os.replace(tmp, path)


def adopt_probe(curriculum: Any, record: dict) -> bool:
    """Take the band of a probe another stage ran on the same start as `curriculum`'s (a Curriculum of
    kit/train/grpo_curriculum.py); False (nothing changed) when its tasks are not exactly these."""
    rates = record.get("rates") or {}
    if set(rates) != {t.id for t in curriculum.tasks}:
        return False
    cfg = curriculum.cfg
    curriculum.rates = {t.id: float(rates[t.id]) for t in curriculum.tasks}
    band = [t for t in curriculum.tasks if cfg.band_min <= curriculum.rates[t.id] <= cfg.band_max]
    curriculum.band = band or list(curriculum.tasks)
    curriculum.last_probe = int(record.get("step", 0))
    curriculum.band_episodes = {}  # the record holds rates, not episodes: the steps roll theirs out
    return True


def adopt_point(curve: Any, point: dict) -> bool:
    """Take a point another stage scored on the same start and validation tasks as `curve`'s (a LearningCurve
    of kit/train/grpo_curve.py); False (nothing changed) when it scored other tasks or a step already there."""
    ids = {t.id for t in curve.tasks}
    if point.get("tasks") != len(curve.tasks) or not set(point.get("per_task") or {}) <= ids \
            or any(p["step"] == point.get("step") for p in curve.points):
        return False
    point = dict(point)
    point["best"] = curve.best is None or point["pass1"] > curve.best["pass1"]
    if point["best"]:
        curve.best = {k: point[k] for k in ("step", "pass1", "ci95")}
    curve.points.append(point)
    return True
