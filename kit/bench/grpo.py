"""`kit bench grpo`: where a GRPO step's time goes, on the embedded model and the mock domain.

    kit bench grpo --group 4 --tasks-per-step 2 --steps 3 --out bench_grpo.json
    res = bench_grpo(group=2, tasks_per_step=1, steps=1, max_new_tokens=8, max_messages=4)
    print(res.total.line()); res.to_json()

The trainer is the grpo stage's (kit.train.grpo.GRPOTrainer on a policy loaded from an HF folder, the
user simulator from a model spec, reward = the task's checker: kit.stages.grpo.checker_reward), on
tasks of a split of the domain or of a checked-task file (the engine's rl_tasks.jsonl). No curriculum
and no learning curve: only the steps are timed.

What it changes from a recipe's defaults, and why: dynamic filtering is off by default
(`filter_mode`): a small model fails most tasks, its groups would be all-equal and filtered, and the
update, one of the three parts measured, would never run. With filtering off an all-equal group trains
with advantage 0: the forward and backward passes cost what a learning group's do.

Per step, from the trainer's own metrics: rollout s (sampling the episodes, `time/rollout_s`), score
s (the checkers, `time/score_s`), update s (the PPO-clip minibatches, `time/update_s`), step s (all
of a step: the three, plus building the rows), episodes (of every group drawn), episodes/s (episodes
/ step s), rows and tokens trained. The first step also pays one-time costs (kernels chosen, caches
filled): run 2 or more steps to see the steady state.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit import metrics as M


@dataclass
class StepTimes:
    """One step's numbers (or the run's totals, `step` None)."""

    step: int | None
    rollout_s: float
    score_s: float
    update_s: float
    step_s: float
    episodes: int
    rows: int
    tokens: int
    skip_reason: str = ""
    turns: int = 0  # assistant turns trained (several per row when packed)
    passes: int = 0  # forward/backward passes of the update (micro-batches)
    peak_rss_gib: float = 0.0  # the process's peak resident memory at the step's end

    @property
    def episodes_per_s(self) -> float:
        return self.episodes / self.step_s if self.step_s > 0 else 0.0

    def line(self) -> str:
        head = "total" if self.step is None else f"step {self.step}"
        skipped = f" SKIPPED: {self.skip_reason}" if self.skip_reason else ""
        return (f"{head}: rollout {self.rollout_s:.2f} s, score {self.score_s:.2f} s, update {self.update_s:.2f} s, "
                f"step {self.step_s:.2f} s; {self.episodes} episodes, {self.episodes_per_s:.2f} episodes/s; "
                f"{self.turns} turns in {self.rows} rows ({self.passes} passes), {self.tokens} tokens trained; "
                f"peak RSS {self.peak_rss_gib:.2f} GiB{skipped}")

    def to_json(self) -> dict:
        return {**asdict(self), "episodes_per_s": self.episodes_per_s}

    @classmethod
    def of(cls, m: dict) -> StepTimes:
        """From one step's metrics (kit.train.grpo.GRPOTrainer.step)."""
        return cls(step=m["step"], rollout_s=m["time/rollout_s"], score_s=m["time/score_s"],
                   update_s=m.get("time/update_s", 0.0), step_s=m[M.STEP_TIME],
                   episodes=int(m.get("proc/episodes", 0)), rows=int(m.get("train/rows", 0)),
                   tokens=int(m.get("train/tokens", 0)), skip_reason=m.get("skip_reason") or "",
                   turns=int(m.get("train/turns", 0)), passes=int(m.get(M.MICRO_BATCHES, 0)),
                   peak_rss_gib=float(m.get(M.PEAK_RSS) or 0.0))

    @classmethod
    def sum(cls, steps: list[StepTimes]) -> StepTimes:
        return cls(None, *(sum(getattr(s, f) for s in steps) for f in
                           ("rollout_s", "score_s", "update_s", "step_s", "episodes", "rows", "tokens")),
                   turns=sum(s.turns for s in steps), passes=sum(s.passes for s in steps),
                   peak_rss_gib=max((s.peak_rss_gib for s in steps), default=0.0))


@dataclass
class GRPOBench:
    settings: dict
    steps: list[StepTimes]
    load_s: float
    machine: dict = field(default_factory=dict)

    @property
    def total(self) -> StepTimes:
        return StepTimes.sum(self.steps)

    def to_json(self) -> dict:
        return {"settings": self.settings, "machine": self.machine, "load_s": self.load_s,
                "steps": [s.to_json() for s in self.steps], "total": self.total.to_json()}


def bench_tasks(dom, split: str = "heldout", tasks_file: str | None = None) -> tuple[list, dict]:
    """(tasks, checked tasks by id): every task of a checked-task file, else of the domain's split."""
    from kit.errors import BadInput, NotFound
    from kit.runner.stage import split_tasks
    from kit.stages.grpo import read_checked_tasks

    if tasks_file:
        if not Path(tasks_file).is_file():
            raise NotFound(f"no tasks file {tasks_file}", "give a JSONL of checked tasks (a synthesize stage's "
                           "rl_tasks.jsonl), or --split")
        checked = read_checked_tasks(Path(tasks_file))
        if not checked:
            raise BadInput(f"{tasks_file} holds no checked task", "give a synthesize stage's rl_tasks.jsonl")
        return [r.task for r in checked.values()], checked
    return split_tasks(dom, split)[0], {}


def bench_grpo(group: int = 4, tasks_per_step: int = 2, steps: int = 2, max_new_tokens: int = 64,
               max_messages: int = 12, model: str | None = None, user_model: str = "embedded",
               domain: str = "mock", split: str = "heldout", tasks_file: str | None = None,
               filter_mode: str = "off", seed: int = 0, log: Callable[[str], None] | None = print,
               pack_turns: bool = True, micro_batch_size: int = 4,
               micro_batch_tokens: int | None = None, lora: bool = False, cpu_bf16: bool = False) -> GRPOBench:
    """Build the trainer, run `steps` steps, and return each step's times (see the module doc); `log`
    gets one line per step as it ends."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kit.envs import load_domain
    from kit.llm.embedded import ensure_embedded_model
    from kit.llm.spec import ModelSpec
    from kit.stages.grpo import checker_reward
    from kit.train.grpo import GRPOTrainer
    from kit.train.grpo_config import GRPOConfig

    from kit.llm import precision

    if cpu_bf16:  # as a stage's cpu_bf16 does: through the environment, read by the samplers and the update
        os.environ[precision.ENV] = "1"
    t0 = time.perf_counter()
    dom = load_domain(domain)
    tasks, checked = bench_tasks(dom, split, tasks_file)
    folder = ModelSpec.parse(model, folder_kind="hf").folder() if model else str(ensure_embedded_model())
    user = str(ModelSpec.parse(user_model, folder_kind="hf"))
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    policy = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    cfg = GRPOConfig(train_steps=steps, group_size=group, tasks_per_step=tasks_per_step,
                     max_new_tokens=max_new_tokens, max_messages=max_messages, filter_mode=filter_mode,
                     resample_budget=0, user_model=user, seed=seed, print_metrics=False, pack_turns=pack_turns,
                     micro_batch_size=micro_batch_size, micro_batch_tokens=micro_batch_tokens, lora=lora)
    trainer = GRPOTrainer(policy, tokenizer, tasks, cfg, domain=dom, reward_fn=checker_reward(dom, checked))
    _ = trainer.user  # the user simulator loads here, not inside the first step's rollout time
    load_s = time.perf_counter() - t0
    times: list[StepTimes] = []

    def on_step(m: dict) -> None:
        times.append(StepTimes.of(m))
        if log is not None:
            log(times[-1].line())

    trainer.train(on_step=on_step)
    settings = {"group": group, "tasks_per_step": tasks_per_step, "steps": steps, "max_new_tokens": max_new_tokens,
                "max_messages": max_messages, "filter_mode": filter_mode, "seed": seed, "domain": domain,
                "tasks": tasks_file or f"split:{split}", "n_tasks": len(tasks), "model": model or "embedded",
                "user_model": user_model, "pack_turns": pack_turns, "micro_batch_size": micro_batch_size,
                "micro_batch_tokens": micro_batch_tokens, "lora": lora, "cpu_bf16": precision.enabled()}
    machine = {"device": str(trainer.acc.device), "torch_threads": torch.get_num_threads(),
               "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
               "python": platform.python_version(), "torch": torch.__version__}
    return GRPOBench(settings, times, round(load_s, 2), machine)
